"""Documents and models never speak in the bot's voice: the pure functions that defuse their text
on each platform (the end-to-end checks are in each platform's ``test_untrusted_text_*``)."""

from __future__ import annotations

import pytest

from adapters.console import translate as console
from adapters.discord_bot import render as discord_render
from adapters.slack import blocks as slack_blocks
from adapters.slack.sending import streamed_text
from adapters.untrusted_text import unmask_links
from bot.neutral import CitationKind, CitationView, Reply, ReplyKind
from tests.adapters.untrusted import DISCORD_MENTIONS, LINK, MASKED, MODEL_ANSWER, SHOWN, SLACK_MENTIONS, TITLE

LINKS = [
    (MASKED, SHOWN),
    ("![a diagram](https://x.test/d.png)", "![a diagram] (https://x.test/d.png)"),
    ('[docs](https://x.test "the title")', '[docs] (https://x.test "the title")'),
    ("[a [nested] label](https://x.test)", "[a [nested] label] (https://x.test)"),
    ("[![logo](https://x.test/l.png)](https://evil.example)", "[![logo] (https://x.test/l.png)] (https://evil.example)"),
    ("[text](<https://x.test/a b>)", "[text] (<https://x.test/a b>)"),
    # Definitions, which make [text][label] and [label] links: at a line's start, in a list, a quote, over lines.
    ("See [here][ref].\n\n[ref]: https://evil.example", "See [here][ref].\n\n[ref] : https://evil.example"),
    ("- [ref]: https://evil.example", "- [ref] : https://evil.example"),
    ("> [ref]: https://evil.example", "> [ref] : https://evil.example"),
    ("[a long\nlabel]: https://evil.example", "[a long\nlabel] : https://evil.example"),
]
UNCHANGED = [
    "The pager escalates after ten minutes [1][2].",
    "Who carries what [1]: the on-call engineer.",  # a citation before a colon, within a line
    "if pages[0]:\n    escalate()",  # code: an index before a colon
    "[1] The handbook, and [2] the runbook.",
    "Autolinks such as <https://x.test> show their address.",
]


@pytest.mark.parametrize(("text", "shown"), LINKS)
def test_no_markdown_link_survives_and_its_address_shows(text: str, shown: str) -> None:
    assert unmask_links(text) == shown
    assert unmask_links(shown) == shown  # already safe: nothing more to do


@pytest.mark.parametrize("text", UNCHANGED)
def test_text_without_links_is_left_as_written(text: str) -> None:
    assert unmask_links(text) == text


@pytest.mark.parametrize("text", [MODEL_ANSWER, *(text for text, _ in LINKS)])
def test_a_growing_text_never_shows_a_link_it_must_take_back(text: str) -> None:
    """What a stream shows of each prefix of a text (unmasked) begins what it shows of every
    longer one, Slack's escaping included: appending never needs undoing."""
    for safe in (unmask_links, streamed_text):
        shown = [safe(text[:end]) for end in range(len(text) + 1)]
        assert all(later.startswith(earlier) for earlier, later in zip(shown, shown[1:], strict=False))


# -- Slack ------------------------------------------------------------------------------------------


def citation(title: str = TITLE, quote: str = MODEL_ANSWER) -> CitationView:
    return CitationView(1, CitationKind.EXCERPT, 0, "n1", title, LINK, quote)


def test_slack_markdown_escapes_every_mention_and_unmasks_links() -> None:
    [message] = slack_blocks.render_reply(Reply(ReplyKind.ANSWER, MODEL_ANSWER, (citation(),), answer_id="a1"))
    [markdown] = [b["text"] for b in message.blocks if b["type"] == "markdown"]
    assert "<" not in markdown and "](" not in markdown and SHOWN in markdown
    assert all(m.replace("<", "&lt;") in markdown for m in SLACK_MENTIONS)
    # The fallback text (notifications) is escaped mrkdwn, the link unmasked too.
    assert "<" not in message.text and "](" not in message.text and "&lt;!channel&gt;" in message.text
    # The source's title links to the document (the bot's own link); its quote is inert text.
    [source] = [b["text"]["text"] for b in message.blocks if b.get("block_id") == "raptor_source_1"]
    assert source.startswith(f"*[1]* <{LINK}|{TITLE}>")
    assert "](" not in source and "<!" not in source and "<@" not in source
    assert streamed_text(MODEL_ANSWER) == markdown


def test_slack_sections_of_other_replies_unmask_links() -> None:
    [message] = slack_blocks.render_reply(Reply(ReplyKind.INFO, f"Summary: {MASKED} <!here>"))
    [section] = message.blocks
    assert section["text"]["text"] == f"Summary: {SHOWN} &lt;!here&gt;"


# -- Discord ----------------------------------------------------------------------------------------


def test_discord_safe_text_shows_mentions_and_links_inert() -> None:
    safe = discord_render.safe_text(MODEL_ANSWER)
    assert SHOWN in safe and "](" not in safe
    for mention in DISCORD_MENTIONS:
        assert mention not in safe and mention.replace("@", "@\u200b") in safe
    assert len(discord_render.draft_content("@everyone " * 400)) <= discord_render.CONTENT_LIMIT


def test_discord_answers_and_other_replies_are_rendered_safe_with_the_bots_link_kept() -> None:
    [answer] = discord_render.render_reply(Reply(ReplyKind.ANSWER, MODEL_ANSWER, (citation(),), answer_id="a1"))
    text, sources = answer.embeds
    assert "](" not in (text.description or "") and "@everyone" not in (text.description or "")
    [field] = sources.fields
    assert "@everyone" not in (field.name or "") and "@everyone" not in (field.value or "")
    assert f"[open the source]({LINK})" in (field.value or "")  # the bot's own link stays a link
    [info] = discord_render.render_reply(Reply(ReplyKind.INFO, f"Sources: {TITLE} {MASKED}"))
    assert info.content == f"Sources: Accounts @\u200beveryone {SHOWN}"


# -- console ----------------------------------------------------------------------------------------


def test_the_console_prints_no_escape_sequence() -> None:
    hidden = "open \x1b]8;;https://evil.example\x1b\\the reset page\x1b]8;;\x1b\\ now\r\x9b2J"
    printed = console.render_reply(Reply(ReplyKind.ANSWER, hidden, (citation(quote=hidden),)))
    assert not any(ord(char) < 32 and char not in "\n\t" or 0x7F <= ord(char) <= 0x9F for char in printed)
    assert "open ]8;;https://evil.example\\the reset page]8;;\\ now2J" in printed  # the address in sight
    assert console.printable("a\tb\nc") == "a\tb\nc"
