"""Answers with their citations, retrieval hits and votes.

Chat adapters get an answer as a neutral :class:`~bot.neutral.Reply` (:func:`answer_reply`)
and lay its citations out themselves; the command line prints :func:`answer_text`,
whose citation lines are the console chat's.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.neutral import CitationKind, CitationView, Reply, ReplyKind
from bot.texts.words import count, node_kind, when
from raptor_engine import Answer, AnswerRecord, Citation, Hit, IngestResult

# A channel holding no source at all (none ever added, or all forgotten): said to a question
# asked there (nothing was searched, so not "I could not find anything") and to a rebuild.
NO_MATERIAL = "No material in this channel yet: upload a file or pin a message, then ask again."
EMPTY_QUESTION = "Ask me a question about this channel's material, or type help for the commands."
HIT_CHARS = 100  # characters of a retrieved node's text shown per hit


def citation_view(citation: Citation) -> CitationView:
    """The neutral view of one citation: an excerpt (a leaf) or a summary (layer 1 and up)."""
    kind = CitationKind.EXCERPT if citation.layer == 0 else CitationKind.SUMMARY
    return CitationView(
        number=citation.number,
        kind=kind,
        layer=citation.layer,
        node_id=citation.node_id,
        title=citation.title,
        link=citation.link,
        quote=citation.quote,
    )


def answer_reply(answer: Answer, thread: str = "", answer_id: str = "") -> Reply:
    """The answer with its numbered citations, in the question's thread; the answer's warning is kept."""
    return Reply(
        ReplyKind.ANSWER,
        answer.text,
        citations=tuple(citation_view(c) for c in answer.citations),
        warning=answer.warning,
        thread=thread,
        answer_id=answer_id,
    )


def citation_line(citation: CitationView) -> str:
    """``[1] summary (layer 2) · Title — “quote…” link (node ID)``; excerpts without a layer."""
    link = f" {citation.link}" if citation.link else ""
    kind = node_kind(citation.layer).lower()
    return f"[{citation.number}] {kind} · {citation.title} — “{citation.quote}”{link} (node {citation.node_id})"


def answer_text(answer: Answer) -> str:
    """The answer as plain text (see :func:`cited_text`)."""
    return cited_text(answer.text, answer.warning, [citation_view(c) for c in answer.citations])


def cited_text(text: str, warning: str, citations: Sequence[CitationView]) -> str:
    """An answer as plain text, in a terminal or the command line: ``text``, the ``warning``
    (``⚠ ...``) if any, a blank line, then one :func:`citation_line` per citation."""
    lines = [text]
    if warning:
        lines.append(f"⚠ {warning}")
    if citations:
        lines.append("")
        lines += [citation_line(citation) for citation in citations]
    return "\n".join(lines)


def hit_line(hit: Hit) -> str:
    """One retrieved node: ``0.812  NODE-ID  layer 0  'its text, cut…'`` (the text as a literal)."""
    return f"{hit.score:.3f}  {hit.node.id}  layer {hit.node.layer}  {hit.node.text[:HIT_CHARS]!r}"


def demo_question_text(question: str) -> str:
    """The demo's question, set off by blank lines before its answer is printed."""
    return f"\nQ: {question}\n"


def ask_your_own_text(channel: str) -> str:
    """The demo's last line: how to ask the sample channel a question of one's own."""
    return f"\nAsk your own: .venv/bin/python -m bot ask --channel {channel} \"...\""


CHANGED_ANSWER = "⚠️ This answer cites material that changed after it was given."


def changed_note(record: AnswerRecord) -> str:
    """The one line an answer citing changed material carries where it is shown again
    (a vote's or a form's thanks), on a line of its own; empty for any other answer."""
    return f"\n{CHANGED_ANSWER}" if record.changed else ""


def changed_answer_notice(title: str) -> str:
    """The line posted in an answer's thread when a source it cites gets a new version."""
    return f"{CHANGED_ANSWER} (“{title}” has a new version; ask again for an answer from it.)"


def vote_text(up: bool, ups: int, downs: int) -> str:
    """Thanks for a vote, with the answer's tally."""
    return f"Thanks, your {'👍' if up else '👎'} is recorded (this answer: {ups} 👍, {downs} 👎)."


FEEDBACK_SHOWN = 10  # the newest 👎 and unanswered questions `feedback` lists, each


def feedback_text(correction_kept: bool | None = None, added: IngestResult | None = None) -> str:
    """Thanks for a 👎's form, and what became of the right answer given in it, if any."""
    thanks = "Thanks, your feedback is stored with the question and the answer."
    if correction_kept is None:
        return thanks
    if not correction_kept:
        return thanks + " Only a channel admin's right answer becomes a source; a channel admin can add it."
    assert added is not None
    if added.duplicate:
        return thanks + f" That right answer is already a source of this channel (“{added.source.title}”)."
    return (thanks + f" Your right answer is a source of this channel now (“{added.source.title}”): "
            "I answer from it, and cite it, from the next question on.")


def feedback_report_text(answers: Sequence[AnswerRecord], shown: int = FEEDBACK_SHOWN) -> str:
    """The channel's coverage gaps for its admins: the newest answers voted 👎, with what
    people said was wrong, and the newest questions the material did not answer."""
    downs = [a for a in answers if a.downs][-shown:]
    missed = [a for a in answers if not a.found][-shown:]
    lines = [f"👎 on {count(len(downs), 'answer')} (newest last):" if downs else "No answer has a 👎."]
    for record in downs:
        lines.append(f"• “{_clip(record.question)}” ({record.ups} 👍, {record.downs} 👎, {when(record.answered_at)})")
        lines += [f"    – {_clip(reason)}" for reason in record.reasons.values() if reason]
        lines += [f"    {CHANGED_ANSWER}"] if record.changed else []
    lines.append(f"Questions I could not answer ({len(missed)}, newest last):" if missed
                 else "Every question asked here found an answer in the material.")
    lines += [f"• “{_clip(record.question)}” ({when(record.answered_at)})" for record in missed]
    return "\n".join(lines)


def _clip(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
