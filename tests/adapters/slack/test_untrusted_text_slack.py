"""Documents and models never speak in the bot's voice on Slack, end to end: the real slack-bolt app
against the stand-in Slack, what the stand-in received checked.

An offline answer quotes a document holding a masked link and Slack's mentions word for
word; a model (``testkit/openai_stub.py``) writes the same into its answer, streamed
natively or, where Slack refuses streaming, shown by ``chat.update`` edits. On every path
(markdown blocks, fallback text, the sources, each streamed chunk, each edit) no ``<``
reaches Slack unescaped, so no mention notifies anyone, and no link is masked; the link
the bot makes to the cited document stays a link.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from adapters.slack.app import SlackRunning
from bot.runtime import Assistant
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine
from testkit.openai_stub import OpenAIStub
from testkit.slack_api import BOT_USER, SlackStandIn
from tests.adapters.slack import test_slack_streaming as streaming
from tests.adapters.slack.test_app import ANA, CHANNEL, key, run
from tests.adapters.untrusted import DOCUMENT, LINK, QUESTION, SHOWN, SLACK_MENTIONS, TITLE

STREAMING_CALLS = ("chat.startStream", "chat.appendStream", "chat.stopStream")
HANDBOOK, HANDBOOK_LINK = "The Aurora Team Handbook", "https://x.test/f"  # what the streamed answers cite


def assert_inert(text: str) -> None:
    """Text Slack received: no ``<`` of Slack's syntax, no masked link, the address in sight."""
    assert "<" not in text and "](" not in text, text


def assert_answer_message(message: dict[str, Any], title: str = TITLE, link: str = LINK) -> None:
    """An answer as posted (or put in its draft's place): its markdown, fallback and sources inert,
    the mentions shown escaped, the bot's link to the cited document (``title``, ``link``) a link."""
    [markdown] = [b["text"] for b in message["blocks"] if b["type"] == "markdown"]
    assert_inert(markdown)
    assert SHOWN in markdown and all(m.replace("<", "&lt;") in markdown for m in SLACK_MENTIONS), markdown
    assert_inert(message["text"])
    [source] = [b["text"]["text"] for b in message["blocks"] if b.get("block_id") == "raptor_source_1"]
    assert source.startswith(f"*[1]* <{link}|{title}>"), source  # the one link in the message: the bot's
    assert_inert(source.removeprefix(f"*[1]* <{link}|{title}>"))


@pytest.mark.parametrize("mode", ["socket", "http"])
def test_an_offline_answer_quoting_a_document_notifies_no_one_and_masks_no_link(
        engine: Engine, tmp_path: Path, mode: str) -> None:
    engine.ingest_bytes(key(), DOCUMENT, "accounts.md", LINK, "Ana", "F1")

    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        asked, _ = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> {QUESTION}")
        [answer] = await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="the answer")
        assert_answer_message(answer)

    run(engine, tmp_path, mode, body)


def test_a_streamed_model_answer_notifies_no_one_and_masks_no_link_in_any_chunk(
        untrusted_model: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant, stub: OpenAIStub) -> None:
        asked, _ = await streaming.ask(slack)
        await slack.wait_until(lambda: slack.calls_of("chat.update"), what="the finished answer", timeout=20)
        await running.handling.wait_idle()
        chunks = [str(c.params.get("markdown_text") or "") for c in slack.calls if c.method in STREAMING_CALLS]
        assert len(chunks) >= 3, chunks  # the link and the mentions came over several appends
        for chunk in chunks:
            assert "<" not in chunk, chunks
        streamed = "".join(chunks)
        assert_inert(streamed)
        assert SHOWN in streamed and all(m.replace("<", "&lt;") in streamed for m in SLACK_MENTIONS)
        [update] = slack.calls_of("chat.update")
        shown = slack.shown(CHANNEL, update.params["ts"])
        assert shown is not None
        assert_answer_message(shown, HANDBOOK, HANDBOOK_LINK)
        assert not slack.rejected(), slack.rejected()

    streaming.run(untrusted_model, embedder, tmp_path, body)


def test_an_answer_shown_by_edits_notifies_no_one_and_masks_no_link_in_any_draft(
        untrusted_model: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant, stub: OpenAIStub) -> None:
        slack.streaming_refusal = "unknown_method"
        asked, _ = await streaming.ask(slack)
        await slack.wait_until(lambda: any(c.params.get("blocks") for c in slack.calls_of("chat.update")),
                               what="the finished answer", timeout=30)
        await running.handling.wait_idle()
        drafts = [c for c in slack.calls if c.method in ("chat.postMessage", "chat.update")
                  and not c.params.get("blocks")]
        assert len(drafts) >= 2, "no draft was edited: the test proves nothing"
        for draft in drafts:
            assert_inert(str(draft.params["text"]))
        [last] = [c for c in slack.calls_of("chat.update") if c.params.get("blocks")][-1:]
        finished = slack.shown(CHANNEL, last.params["ts"])
        assert finished is not None
        assert_answer_message(finished, HANDBOOK, HANDBOOK_LINK)

    streaming.run(untrusted_model, embedder, tmp_path, body)
