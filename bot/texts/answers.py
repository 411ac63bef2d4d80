"""Answers with their citations, retrieval hits and votes.

Chat adapters get an answer as a neutral :class:`~bot.neutral.Reply` (:func:`answer_reply`)
and lay its citations out themselves; the command line prints :func:`answer_text`,
whose citation lines are the console chat's.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.neutral import CitationKind, CitationView, Reply, ReplyKind
from bot.texts.words import ago, count, node_kind, when
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
        notes=citation_notes(citation),
    )


def citation_notes(citation: Citation) -> str:
    """What is said beside a citation: its source's age, and whether a summary may be outdated."""
    age = ago(citation.updated_at)
    notes = [f"updated {age}"] if age else []
    if citation.outdated_by:
        change = "was added" if citation.outdated_by_addition else "changed"
        notes.append(f"may be outdated: built before “{citation.outdated_by}” {change}")
    return " · ".join(notes)


UNSUPPORTED_MARK = "⚠"
UNSUPPORTED_NOTE = "Marked ⚠: not supported by the passages cited."
QUOTED_SENTENCES = 3  # unsupported sentences the note quotes (a terminal cannot mark them in place)
SENTENCE_CHARS = 100


def checked_text(answer: Answer, drop_unsupported: bool = False) -> str:
    """The answer's text with each sentence its citations do not support marked ``⚠`` after
    it, or left out with ``drop_unsupported``; unchanged when every sentence is supported."""
    text = answer.text
    for sentence in answer.unsupported:
        text = text.replace(sentence, "" if drop_unsupported else f"{sentence} {UNSUPPORTED_MARK}", 1)
    if drop_unsupported and answer.unsupported:
        text = "\n".join(" ".join(line.split()) for line in text.splitlines()).strip()
    return text


def unsupported_note(answer: Answer, drop_unsupported: bool = False) -> str:
    """The one line ending an answer with unsupported sentences: how many were left out, or
    that the marked ones are unsupported, quoting them (where an answer shown as it was
    written cannot be marked in place, the quotes say which); empty when there are none."""
    found = answer.unsupported
    if not found:
        return ""
    if drop_unsupported:
        them = "it" if len(found) == 1 else "them"
        return f"{count(len(found), 'sentence')} left out: the passages cited do not support {them}."
    quoted = ", ".join(f"“{_clip(sentence, SENTENCE_CHARS)}”" for sentence in found[:QUOTED_SENTENCES])
    more = f" and {len(found) - QUOTED_SENTENCES:,} more" if len(found) > QUOTED_SENTENCES else ""
    return f"{UNSUPPORTED_NOTE} {quoted}{more}."


def broke_off_text(failure: str) -> str:
    """The failure of an answer that had begun to show: the words shown are not the whole answer."""
    return f"The answer broke off before it was complete. {failure}"


def answer_reply(answer: Answer, thread: str = "", answer_id: str = "", drop_unsupported: bool = False) -> Reply:
    """The answer with its numbered citations, in the question's thread: its unsupported
    sentences marked (or left out) and the note saying so after the answer's own warning."""
    text = checked_text(answer, drop_unsupported)
    warning = " ".join(part for part in (answer.warning, unsupported_note(answer, drop_unsupported)) if part)
    return Reply(
        ReplyKind.ANSWER,
        text,
        citations=tuple(citation_view(c) for c in answer.citations),
        warning=warning,
        thread=thread,
        answer_id=answer_id,
        written=answer.text if text != answer.text else "",
    )


def citation_line(citation: CitationView) -> str:
    """``[1] summary (layer 2) · Title — “quote…” link (node ID)``; excerpts without a layer.
    A citation whose quote could not be verified in its source shows no quote."""
    link = f" {citation.link}" if citation.link else ""
    kind = node_kind(citation.layer).lower()
    quoted = f" — “{citation.quote}”" if citation.quote else ""
    notes = f" · {citation.notes}" if citation.notes else ""
    return f"[{citation.number}] {kind} · {citation.title}{notes}{quoted}{link} (node {citation.node_id})"


def answer_text(answer: Answer) -> str:
    """The answer as plain text (see :func:`cited_text`), unsupported sentences marked."""
    reply = answer_reply(answer)
    return cited_text(reply.text, reply.warning, reply.citations)


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


def ask_your_own_text(channel: str, command: str) -> str:
    """The demo's last line: how to ask the sample channel a question of one's own, with
    ``command``, how the program is run where it runs (``.venv/bin/python -m bot``)."""
    return f"\nAsk your own: {command} ask --channel {channel} \"...\""


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
    # Candidates, never added on their own: an admin's correction of one joins the approved questions.
    lines = [f"👎 on {count(len(downs), 'answer')} (newest last; candidates for a correction, which joins the "
             "questions every rebuild is checked against):" if downs else "No answer has a 👎."]
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
