"""Answers that render on Slack: the answer's own Markdown in ``markdown`` blocks.

Pure rendering first (every message checked with the stand-in's own, independent
implementation of Slack's limits, ``message_problem``), then end to end: the real
slack-bolt app against the stand-in Slack, the answer written by a model (the
stand-in OpenAI-compatible server, reached through the ``llm`` configuration and the
real openai client), arriving in ``chat.postMessage`` as a markdown block.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

from adapters.slack import blocks
from adapters.slack.blocks import MARKDOWN_TEXT_LIMIT, SlackMessage
from bot.composition import llm_settings
from bot.config import BotConfig, Config, LLMConfig, RateLimitConfig
from bot.engine_calls import AsyncEngine
from bot.neutral import CitationKind, CitationView, Question, Reply, ReplyKind
from bot.runtime import Assistant
from raptor_engine import ExtractiveSummarizer, LLMAnswerer, LLMClient
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine
from raptor_engine.store import ChromaStore
from testkit.openai_stub import running_stub
from testkit.slack_api import BOT_USER, SlackStandIn, app_running, message_problem
from tests.adapters.recording import recorded
from tests.conftest import SAMPLE

TABLE = "| Role | Pager | Escalates after |\n| --- | :---: | ---: |\n| primary | yes | 10 min |\n| secondary | no | 20 min |"
QUOTE = CitationView(1, CitationKind.EXCERPT, 0, "l0.aa", "Handbook", "", "Use *stars* & <pipes> | here # not a heading")


def accepted(messages: list[SlackMessage]) -> list[SlackMessage]:
    for message in messages:
        assert message_problem(message.payload()) == "", message.payload()
    return messages


def markdown_blocks(message: SlackMessage | dict[str, Any]) -> list[dict[str, Any]]:
    found = message.blocks if isinstance(message, SlackMessage) else message.get("blocks") or ()
    found = json.loads(found) if isinstance(found, str) else found  # as a form-encoded call sends them
    return [block for block in found if block["type"] == "markdown"]


def fences_balanced(text: str) -> bool:
    return len(re.findall(r"(?m)^```", text)) % 2 == 0


# -- pure rendering ----------------------------------------------------------------------------


def test_a_markdown_block_carries_a_table_and_the_quotes_stay_escaped() -> None:
    text = f"## On call\n\nWho carries what [1]:\n\n{TABLE}\n\n- acknowledge\n- escalate"
    [message] = accepted(blocks.render_reply(Reply(ReplyKind.ANSWER, text, (QUOTE,), answer_id="a1")))
    [markdown] = markdown_blocks(message)
    assert markdown["text"] == text  # as written: Markdown, not mrkdwn, not escaped
    assert message.blocks[0] is markdown  # the answer first, then its sources and buttons as before
    [source] = [b for b in message.blocks if b.get("block_id") == "raptor_source_1"]
    assert source["type"] == "section" and source["text"]["type"] == "mrkdwn"
    assert source["text"]["text"].endswith(">Use *stars* &amp; &lt;pipes&gt; | here # not a heading")
    assert message.blocks[-1]["type"] == "context_actions"  # Slack's native 👍/👎
    assert message.text.startswith("## On call") and "&lt;" not in markdown["text"]


def test_a_long_answer_is_split_into_messages_at_paragraphs_and_never_inside_code() -> None:
    paragraph = "The on-call engineer answers pages & rolls back bad deploys before anything else. " * 20
    code = "```python\n" + "\n".join(f"page(engineer={n})  # & <escalate>" for n in range(300)) + "\n```"
    text = "\n\n".join([paragraph] * 12 + [TABLE, code] + [paragraph] * 6)
    reply = Reply(ReplyKind.ANSWER, text, (QUOTE,), answer_id="a1")
    messages = accepted(blocks.render_reply(reply))
    assert len(messages) >= 3
    pieces = []
    for message in messages:
        found = markdown_blocks(message)
        assert sum(len(b["text"]) for b in found) <= MARKDOWN_TEXT_LIMIT
        pieces += [b["text"] for b in found]
    assert all(fences_balanced(piece) for piece in pieces)  # a cut code block is closed and reopened
    assert all(piece.endswith((".", "```", "|")) for piece in pieces)  # cut at a paragraph's end
    assert any(TABLE in piece for piece in pieces)  # the table moved whole to one message
    joined = "\n".join(pieces).replace("```\n```python\n", "")  # the reopening undone
    assert " ".join(joined.split()) == " ".join(text.replace("<", "&lt;").split())  # "<" is never Slack's syntax
    assert sum(1 for m in messages for b in m.blocks if b["type"] == "context_actions") == 1  # 👍/👎 once, at the end


def test_a_code_block_that_fits_moves_whole_to_the_next_message() -> None:
    code = "```\n" + "x = 1\n" * 500 + "```"  # 3,000 characters
    text = "A paragraph. " * 800 + "\n" + code  # the code straddles the 12,000th character
    messages = accepted(blocks.render_reply(Reply(ReplyKind.ANSWER, text)))
    [first], [second] = (markdown_blocks(m) for m in messages)
    assert "```" not in first["text"] and second["text"].startswith(code)


def test_the_stand_in_refuses_markdown_over_the_limit() -> None:
    over = {"channel": "C1", "text": "x", "blocks": [{"type": "markdown", "text": "x" * 6001},
                                                      {"type": "markdown", "text": "y" * 6000}]}
    assert message_problem(over) == "invalid_blocks"  # 12,001 over one message's markdown blocks
    over["blocks"][0]["text"] = "x" * 6000
    assert message_problem(over) == ""
    assert message_problem({"text": "x", "blocks": [{"type": "markdown", "text": ""}]}) == "invalid_blocks"


# -- end to end ----------------------------------------------------------------------------------

CHANNEL = "C200"
ANA = "UANA"
MODEL_ANSWER = f"Who carries the pager [1]:\n\n{TABLE}\n\n**Escalate** when a page is not acknowledged [1]."


def answers(slack: SlackStandIn, thread: str) -> list[dict[str, Any]]:
    """The bot's finished answers in a thread, as people see them (after any streaming and edits)."""
    return [m for m in slack.thread(CHANNEL, thread)
            if m.get("user") == BOT_USER and not m.get("streaming") and markdown_blocks(m)]


def model_engine(client: LLMClient, embedder: SentenceTransformerEmbedder, tmp_path: Path) -> Engine:
    """The session's model for embeddings; answers from ``client``'s model."""
    counter = embedder.token_counter()
    return Engine(ChromaStore.embedded(tmp_path / "chroma"), embedder, counter, ExtractiveSummarizer(counter),
                  LLMAnswerer(client, client.settings))


def test_a_model_written_table_arrives_in_slack_as_a_markdown_block(
    embedder: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    with running_stub() as stub, LLMClient(llm_settings(Config(llm=LLMConfig(
            base_url=stub.base_url, model="stub-model", max_retries=1)))) as client:
        stub.answer_text = MODEL_ANSWER
        engine = model_engine(client, embedder, tmp_path)
        limits = RateLimitConfig(questions_per_user_per_minute=0, rebuilds_per_channel_per_hour=0)
        config = Config(data_dir=tmp_path / "data", bot=BotConfig(rate_limits=limits))

        async def session() -> None:
            bot = Assistant(config, AsyncEngine(engine))
            await bot.start(warm_up=False)
            try:
                async with SlackStandIn() as slack, app_running(bot, slack, "socket") as running:
                    slack.add_user(ANA, "Ana", admin=True)
                    events = recorded(bot)
                    shared, _ = await slack.share_file(CHANNEL, ANA, "aurora-handbook.md", SAMPLE.read_bytes(),
                                                       mimetype="text/markdown")
                    await slack.wait_until(lambda: slack.posts(CHANNEL, shared["ts"]), what="the upload's note")

                    asked, _ = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> Who carries the pager?")
                    [answer] = await slack.wait_until(lambda: answers(slack, asked["ts"]), what="the answer")
                    [markdown] = markdown_blocks(answer)
                    assert TABLE in markdown["text"] and markdown["text"].startswith("Who carries the pager [1]:")
                    assert "**Escalate**" in markdown["text"]  # standard Markdown, not mrkdwn
                    assert any(str(b.get("block_id", "")).startswith("raptor_source_") for b in answer["blocks"])
                    assert answer["text"].startswith("Who carries the pager [1]:")  # the plain-text fallback
                    # It went to Slack so (posted, or put in place of the answer's draft while it was written).
                    carried = [c for c in slack.calls if c.ok and c.method in ("chat.postMessage", "chat.update")
                               and any(TABLE in b.get("text", "") for b in markdown_blocks(c.params))]
                    assert carried

                    # A follow-up in the thread, without a mention: the answer's text is its context.
                    await slack.user_says(CHANNEL, ANA, "And who is second?", thread_ts=asked["ts"])
                    await slack.wait_until(lambda: len(answers(slack, asked["ts"])) == 2, what="the follow-up's answer")
                    question = [e for e in events if isinstance(e, Question)][-1]
                    assert TABLE in question.context[-1]
                    await asyncio.sleep(0.05)
                    await running.handling.wait_idle()
                    assert not slack.rejected(), slack.rejected()
            finally:
                await bot.stop()

        asyncio.run(session())
