"""Answers that render on Discord: Markdown kept as written, tables as aligned code blocks.

Rendered messages are checked with the Discord stand-in's own limit checker
(``message_errors``), the one that answers the real client with Discord's 400 errors.
"""

from __future__ import annotations

import re
from typing import Any

from adapters.discord_bot import render
from bot.neutral import CitationKind, CitationView, Reply, ReplyKind
from testkit.discord_api import message_errors

TABLE = "| Role | Pager | Escalates after |\n| --- | :---: | ---: |\n| primary | **yes** | 10 min |\n| secondary | no | 20 min |"
ALIGNED = (
    "```\n"
    "Role      | Pager | Escalates after\n"
    "----------+-------+----------------\n"
    "primary   |  yes  |          10 min\n"
    "secondary |  no   |          20 min\n"
    "```"
)
QUOTE = CitationView(1, CitationKind.EXCERPT, 0, "l0.aa", "Handbook", "", "| a | b | with *stars*")


def body(outgoing: render.Outgoing) -> dict[str, Any]:
    """The parts of a message body the limits apply to."""
    return {"content": outgoing.content, "embeds": [embed.to_dict() for embed in outgoing.embeds]}


def assert_within_limits(messages: list[render.Outgoing]) -> None:
    for outgoing in messages:
        assert message_errors(body(outgoing), len(outgoing.files)) is None, body(outgoing)


def fences_balanced(text: str) -> bool:
    return len(re.findall(r"(?m)^```", text)) % 2 == 0


def test_a_table_becomes_an_aligned_code_block_and_the_rest_stays_as_written() -> None:
    text = f"## On call\n\nWho carries what [1]:\n\n{TABLE}\n\n- acknowledge\n- escalate\n\n```sh\nrollback --now\n```"
    [outgoing] = render.render_reply(Reply(ReplyKind.ANSWER, text, (QUOTE,), answer_id="a1"))
    answer, sources = outgoing.embeds
    assert answer.description == text.replace(TABLE, ALIGNED)
    assert sources.fields[0].value.startswith(r"> \| a \| b \| with \*stars\*")  # a document's text stays escaped
    assert_within_limits([outgoing])


def test_a_code_block_left_open_is_closed_before_the_warning() -> None:
    [outgoing] = render.render_reply(Reply(ReplyKind.ANSWER, "Run:\n```\nrollback", warning="Check first."))
    assert outgoing.embeds[0].description == "Run:\n```\nrollback\n```\n\n⚠️ *Check first.*"


def test_a_long_answer_splits_within_discords_limits_never_inside_code() -> None:
    paragraph = "The on-call engineer answers pages and rolls back bad deploys before anything else. " * 6
    code = "```python\n" + "\n".join(f"page(engineer={n})" for n in range(400)) + "\n```"
    text = "\n\n".join([paragraph] * 20 + [TABLE, code] + [paragraph] * 10)
    messages = render.render_reply(Reply(ReplyKind.ANSWER, text, (QUOTE,), answer_id="a1"))
    assert_within_limits(messages)
    pieces = [e.description or "" for m in messages for e in m.embeds if e.description]
    assert len(pieces) >= 4 and all(len(piece) <= render.DESCRIPTION_LIMIT for piece in pieces)
    assert all(fences_balanced(piece) for piece in pieces)  # a cut code block is closed and reopened
    assert any(ALIGNED in piece for piece in pieces)
    joined = "\n".join(pieces).replace("```\n```python\n", "")  # the reopening undone
    assert " ".join(joined.split()) == " ".join(text.replace(TABLE, ALIGNED).split())


def test_a_long_text_reply_splits_within_2000_characters_never_inside_code() -> None:
    code = "```\n" + "\n".join(f"{n:>4} | node s1.{n:010d}" for n in range(300)) + "\n```"
    text = "Tree outline:\n\n" + code + "\n\nThat is all."
    messages = render.render_reply(Reply(ReplyKind.INFO, text))
    assert_within_limits(messages)
    assert len(messages) >= 4 and all(len(m.content) <= render.CONTENT_LIMIT for m in messages)
    assert all(fences_balanced(m.content) for m in messages)
    assert all(m.content.startswith("```") for m in messages[1:])  # each continuation reopens the block
    joined = "\n".join(m.content for m in messages).replace("```\n```\n", "")
    assert " ".join(joined.split()) == " ".join(text.split())
