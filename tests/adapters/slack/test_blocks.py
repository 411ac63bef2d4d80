"""Block Kit rendering: what an answer looks like, and Slack's limits kept by splitting.

Every message rendered here is also checked with the stand-in's own,
independent implementation of Slack's limits (``message_problem``).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from adapters.slack import blocks
from adapters.slack.blocks import (
    MARKDOWN_TEXT_LIMIT,
    MAX_BLOCKS,
    MAX_TEXT_CHARS,
    SECTION_TEXT_LIMIT,
    SlackMessage,
)
from adapters.slack.translate import ACTION_FEEDBACK, ACTION_NODE
from bot.neutral import CitationKind, CitationView, Reply, ReplyKind
from testkit.slack_api import message_problem

EXCERPT = CitationView(1, CitationKind.EXCERPT, 0, "l0.aa", "Handbook <v2> & notes", "https://x.test/f?a=1|2",
                       "On call  engineers\ncarry the pager.")
SUMMARY = CitationView(2, CitationKind.SUMMARY, 2, "s2.bb", "Handbook", "", "A summary of on-call duties.")


def accepted(messages: list[SlackMessage]) -> list[SlackMessage]:
    for message in messages:
        assert message_problem(message.payload()) == "", message.payload()
    return messages


def mrkdwn_texts(message: SlackMessage) -> list[str]:
    out = []
    for block in message.blocks:
        if isinstance(block.get("text"), dict):  # a markdown block's text is a string, not mrkdwn
            out.append(block["text"]["text"])
        out += [e["text"] for e in block.get("elements", ()) if e.get("type") == "mrkdwn"]
    return out


def test_an_answer_with_its_sources_and_feedback() -> None:
    reply = Reply(ReplyKind.ANSWER, "Engineers carry the pager [1] & escalate [2].", (EXCERPT, SUMMARY),
                  warning="Partly answered.", answer_id="ans123")
    [message] = accepted(blocks.render_reply(reply))
    ids = [b.get("block_id") for b in message.blocks]
    assert ids[0] == "raptor_answer_0" and "raptor_source_1" in ids and "raptor_source_2" in ids
    # The answer's own text is Markdown, as written; the sources' text is escaped mrkdwn.
    assert message.blocks[0] == {"type": "markdown", "block_id": "raptor_answer_0",
                                 "text": "Engineers carry the pager [1] & escalate [2]."}
    first, second = (b for b in message.blocks if str(b.get("block_id", "")).startswith("raptor_source_"))
    assert first["text"]["text"] == (
        "*[1]* <https://x.test/f?a=1%7C2|Handbook &lt;v2&gt; &amp; notes> · _excerpt_\n>On call engineers carry the pager."
    )
    assert "accessory" not in first
    assert second["text"]["text"].startswith("*[2]* Handbook · _summary, layer 2_")
    assert second["accessory"]["action_id"] == ACTION_NODE and second["accessory"]["value"] == "s2.bb"
    feedback = message.blocks[-1]  # Slack's native 👍/👎 (tests/adapters/slack/test_native_feedback.py)
    assert feedback["type"] == "context_actions"
    [element] = feedback["elements"]
    assert (element["action_id"], element["positive_button"]["value"], element["negative_button"]["value"]) == (
        ACTION_FEEDBACK, "up:ans123", "down:ans123")
    assert ":warning: Partly answered." in mrkdwn_texts(message)
    assert message.text.startswith("Engineers carry the pager [1] &amp; escalate") and "[2] Handbook (summary, layer 2)" in message.text


@pytest.mark.parametrize(
    ("kind", "marker"), [(ReplyKind.ERROR, ":warning: "), (ReplyKind.PROGRESS, ":hourglass_flowing_sand: ")]
)
def test_errors_and_progress(kind: ReplyKind, marker: str) -> None:
    [message] = accepted(blocks.render_reply(Reply(kind, "It broke.", reference="ref42")))
    texts = mrkdwn_texts(message)
    assert texts[0] == marker + "It broke."
    assert ("Reference: `ref42`" in texts) is (kind is ReplyKind.ERROR)


def test_split_text_cuts_at_boundaries_and_never_inside_an_escape() -> None:
    text = ("A & B. " * 300 + "\n\n") * 3
    pieces = blocks.split_text(text, 500)
    assert all(blocks.escaped_length(p) <= 500 for p in pieces)
    assert all(p.endswith(".") for p in pieces)
    assert " ".join(" ".join(pieces).split()) == " ".join(text.split())
    assert blocks.split_text("x" * 1200, 500) == ["x" * 500, "x" * 500, "x" * 200]  # no boundary: hard cuts
    assert blocks.split_text("   ") == []


def long_reply() -> Reply:
    paragraph = "Escalations & <rollbacks> are owned by the on-call engineer, who must answer within ten minutes. "
    text = "\n\n".join(paragraph * 12 for _ in range(60))  # ~70,000 characters before escaping
    citations = tuple(
        CitationView(n, CitationKind.SUMMARY if n % 2 else CitationKind.EXCERPT, n % 3, f"node{n}",
                     "T&" * 200, "https://x.test/" + "p" * 200, "Q<" * 500)
        for n in range(1, 71)
    )
    return Reply(ReplyKind.ANSWER, text, citations, warning="W&" * 2000, answer_id="a1")


def test_a_long_answer_is_split_within_slacks_limits() -> None:
    reply = long_reply()
    messages = accepted(blocks.render_reply(reply))
    assert len(messages) >= 3
    for message in messages:
        assert len(message.blocks) <= MAX_BLOCKS and len(message.text) <= MAX_TEXT_CHARS
        assert all(len(t) <= SECTION_TEXT_LIMIT for t in mrkdwn_texts(message))
        assert sum(len(b["text"]) for b in message.blocks if b["type"] == "markdown") <= MARKDOWN_TEXT_LIMIT
    # The answer reads whole, in order, across the messages, as written (Markdown, its "<" escaped).
    answer = [b["text"] for m in messages for b in m.blocks if b["type"] == "markdown"]
    assert all(b.get("block_id", "").startswith("raptor_answer") for m in messages for b in m.blocks
               if b["type"] == "markdown")
    assert " ".join(" ".join(answer).split()) == " ".join(reply.text.replace("<", "&lt;").split())
    sources = [b["block_id"] for m in messages for b in m.blocks if b.get("block_id", "").startswith("raptor_source_")]
    assert sources == [f"raptor_source_{n}" for n in range(1, 71)]
    assert [m.blocks[-1]["type"] for m in messages][-1] == "context_actions"  # feedback once, at the very end
    assert sum(1 for m in messages for b in m.blocks if b["type"] == "context_actions") == 1


def test_many_short_blocks_and_an_empty_reply() -> None:
    many = Reply(ReplyKind.ANSWER, "ok", tuple(
        CitationView(n, CitationKind.EXCERPT, 0, f"l{n}", f"T{n}", "", "q") for n in range(1, 121)))
    messages = accepted(blocks.render_reply(many))
    assert [len(m.blocks) for m in messages][:2] == [MAX_BLOCKS, MAX_BLOCKS]
    [empty] = accepted(blocks.render_reply(Reply(ReplyKind.INFO, "  ")))
    assert empty.text


def test_the_echo_of_a_slash_question() -> None:
    [message] = accepted(blocks.render_question("UANA", "Who approves <deploys>?"))
    ids: list[Any] = [b["block_id"] for b in message.blocks]
    assert ids == ["raptor_asked", "raptor_question_0"]
    assert message.blocks[1]["text"]["text"] == "Who approves &lt;deploys&gt;?"
    assert re.match(r"<@UANA> asked:", message.text)
