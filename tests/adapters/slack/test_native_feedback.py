"""Slack's native feedback on answers (issue 30, point 3): the real slack-bolt app against the stand-in.

Answers carry Slack's ``feedback_buttons`` element in a ``context_actions`` block, posted and
streamed (the ``blocks`` of ``chat.stopStream``), in place of the bot's own 👍/👎 buttons; a
click on it is the existing vote, and a 👎 opens the existing feedback form. A person's
later vote replaces their earlier one.

Where the shapes come from:

* the block and its element: Slack's reference, docs.slack.dev/reference/block-kit/blocks/
  context-actions-block (its example: ``{"type": "context_actions", "elements": [{"type":
  "feedback_buttons", "action_id": ..., "positive_button": {"text": {"type": "plain_text",
  ...}, "value": ...}, "negative_button": ...}]}``) and .../block-elements/
  feedback-buttons-element (text of 1-75 characters, value up to 2,000); the adapter builds
  it with slack_sdk's own ``ContextActionsBlock``/``FeedbackButtonsElement``/
  ``FeedbackButtonObject`` (slack_sdk/models/blocks), whose test
  tests/slack_sdk/models/test_blocks.py (``ContextActionsBlockTests.test_document``)
  round-trips the same document;
* a stream stopped with that block: slack_sdk's tests/slack_sdk_async/web/
  test_async_chat_stream.py (``chat.stopStream`` carries ``blocks: [{"type":
  "context_actions", "elements": [{"type": "feedback_buttons", ...}]}]``);
* the click: a ``block_actions`` payload whose action is shaped as bolt-js types it
  (``FeedbackButtonsAction``, docs.slack.dev/tools/bolt-js/reference/interfaces/
  FeedbackButtonsAction: ``type: "feedback_buttons"``, ``action_id``, ``block_id``,
  ``action_ts``, the clicked button's ``value`` and ``text``), sent by
  ``SlackStandIn.click_feedback``; Slack's own Bolt for Python assistant template
  (slack-samples/bolt-python-assistant-template, listeners/actions/actions.py) reads the
  clicked button from ``body["actions"][0]["value"]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from slack_sdk.models.blocks import Block

from adapters.slack import blocks, translate
from adapters.slack.app import SlackRunning
from adapters.slack.payload import Origin
from adapters.slack.translate import ACTION_FEEDBACK, ACTION_VOTE_DOWN, ACTION_VOTE_UP
from bot.neutral import Reply, ReplyKind, Vote
from bot.runtime import Assistant
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine
from testkit.openai_stub import OpenAIStub
from testkit.slack_api import SlackStandIn, feedback_element, message_problem
from tests.adapters.slack import test_slack_streaming as streaming
from tests.adapters.slack.test_app import ACK_LIMIT_S, BEN, CHANNEL, MODES, key, run, settle, share_sample
from tests.adapters.slack.test_feedback_form import ask, typed
from tests.adapters.slack.test_slack_streaming import stub  # noqa: F401 (the streaming model, a fixture)

WRONG = "It never says who approves a rollback."


def the_feedback(message: dict[str, Any]) -> tuple[str, str]:
    """The answer id in ``message``'s native feedback element (read from its 👍's value and
    checked against its 👎's), and the element's action id; no other 👍/👎 buttons beside it."""
    block, element = feedback_element(message)
    up, down = element["positive_button"]["value"], element["negative_button"]["value"]
    answer_id = up.split(":", 1)[1]
    assert (up, down) == (translate.vote_value(answer_id, True), translate.vote_value(answer_id, False))
    assert block["block_id"] == blocks.FEEDBACK_BLOCK
    assert not [b for b in message.get("blocks") or () if b.get("type") == "actions"], message["blocks"]
    assert sum(1 for b in message["blocks"] if b.get("type") == "context_actions") == 1
    return answer_id, str(element["action_id"])


# -- the block and the click, read --------------------------------------------------------------


def test_an_answer_ends_with_slacks_native_feedback_element_in_place_of_its_own_buttons() -> None:
    reply = Reply(ReplyKind.ANSWER, "Engineers carry the pager [1].", answer_id="ans123")
    [message] = blocks.render_reply(reply)
    assert message_problem(message.payload()) == ""
    feedback = message.blocks[-1]
    # Slack's documented example, with our action id, labels and values.
    assert feedback == {
        "type": "context_actions", "block_id": "raptor_feedback",
        "elements": [{
            "type": "feedback_buttons", "action_id": ACTION_FEEDBACK,
            "positive_button": {"text": {"type": "plain_text", "text": "Helpful", "emoji": True},
                                "accessibility_label": "This answer helped", "value": "up:ans123"},
            "negative_button": {"text": {"type": "plain_text", "text": "Not helpful", "emoji": True},
                                "accessibility_label": "This answer did not help", "value": "down:ans123"},
        }],
    }
    assert Block.parse(feedback).to_dict() == feedback  # slack_sdk reads it back unchanged
    assert not [b for b in message.blocks if b["type"] == "actions"]  # no second pair of buttons
    # A streamed answer ends with the same block; other replies, and answers not kept, with none.
    assert blocks.feedback_blocks(reply) == [feedback]
    assert blocks.feedback_blocks(Reply(ReplyKind.ANSWER, "x")) == []
    assert blocks.feedback_blocks(Reply(ReplyKind.INFO, "x", answer_id="a1")) == []
    assert blocks.feedback_blocks(Reply(ReplyKind.ANSWER, "x", answer_id="a1", private=True)) == []


def test_a_click_on_the_native_element_is_the_vote_it_stands_for() -> None:
    body = {"type": "block_actions", "team": {"id": "T1"}, "user": {"id": "UBEN", "team_id": "T1"},
            "channel": {"id": "C1"}, "trigger_id": "t-1", "response_url": "https://hooks.slack.test/r/1",
            "container": {"type": "message", "message_ts": "5.000002", "channel_id": "C1", "thread_ts": "5.000001"},
            "message": {"ts": "5.000002", "thread_ts": "5.000001"},
            "actions": [{"type": "feedback_buttons", "action_id": ACTION_FEEDBACK, "block_id": "raptor_feedback",
                         "action_ts": "5.1", "value": "down:a1", "text": {"type": "plain_text", "text": "Not helpful"}}]}
    origin = Origin("T1", "C1", "UBEN", "5.000002", "5.000001")
    down = translate.read_click(body, "T1")
    assert down == translate.Click(origin, ACTION_VOTE_DOWN, "a1", "https://hooks.slack.test/r/1", "t-1")
    assert down.form_answer == "a1"  # a 👎 opens the feedback form about its answer
    up = translate.read_click({**body, "actions": [{**body["actions"][0], "value": "up:a1"}]}, "T1")
    assert up is not None and up.action_id == ACTION_VOTE_UP and up.form_answer == ""
    person = translate.person_from_user({"id": "UBEN", "name": "ben"}, "T1")
    assert up.event(person) == Vote(origin.key, person, "a1", up=True)
    # A value that names no button or no answer is no click of the bot's.
    for value in ("sideways:a1", "up:", "a1", ""):
        assert translate.read_click({**body, "actions": [{**body["actions"][0], "value": value}]}, "T1") is None


# -- end to end: posted answers --------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_later_vote_replaces_an_earlier_one_and_a_thumbs_down_opens_the_form(engine: Engine, tmp_path: Path,
                                                                               mode: str) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await share_sample(slack)
        await settle(running, bot)
        asked, posted, _ = await ask(slack, BEN)
        await settle(running, bot)
        answer_id, _ = the_feedback(posted)

        # 👍: counted and thanked, privately, in the answer's thread.
        delivery = await slack.click_feedback(CHANNEL, BEN, posted, up=True)
        assert delivery.status == 200 and delivery.seconds < ACK_LIMIT_S
        [thanks] = await slack.wait_until(lambda: slack.ephemerals(CHANNEL), what="the 👍's thanks")
        assert thanks["user"] == BEN and thanks["thread_ts"] == asked["ts"] and "Thanks, your 👍" in thanks["text"]
        await settle(running, bot)
        [record] = engine.answers(key())
        assert record.answer_id == answer_id and record.votes == {BEN: 1}

        # Then 👎 by the same person: one 👎 is left, and the form opens as before.
        await slack.click_feedback(CHANNEL, BEN, posted, up=False)
        [view] = await slack.wait_until(slack.opened_views, timeout=ACK_LIMIT_S, what="the feedback form")
        await settle(running, bot)
        [record] = engine.answers(key())
        assert record.votes == {BEN: -1} and (record.ups, record.downs) == (0, 1)
        assert json.loads(view["private_metadata"]) == {"answer": answer_id, "channel": CHANNEL,
                                                        "thread": asked["ts"]}
        assert len(slack.ephemerals(CHANNEL)) == 1  # the form speaks for the 👎, no second thanks

        await slack.submit_view(BEN, view, typed(WRONG))
        await slack.wait_until(lambda: len(slack.ephemerals(CHANNEL)) == 2, what="the feedback's reply")
        await settle(running, bot)
        [record] = engine.answers(key())
        assert record.votes == {BEN: -1} and record.reasons == {BEN: WRONG}

    run(engine, tmp_path, mode, body)


# -- end to end: streamed answers ------------------------------------------------------------------


def test_a_streamed_answer_is_stopped_with_the_native_element_and_its_votes_count(
        stub: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:  # noqa: F811
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant, stub: OpenAIStub) -> None:
        asked, _ = await streaming.ask(slack)
        await slack.wait_until(lambda: slack.calls_of("chat.update"), what="the finished answer", timeout=20)
        await running.handling.wait_idle()
        [kept] = bot.engine.answers(streaming.key())

        # The stream ends with Slack's native 👍/👎 (the blocks of chat.stopStream) ...
        [stop] = slack.calls_of("chat.stopStream")
        assert stop.params["blocks"] == blocks.feedback_blocks(Reply(ReplyKind.ANSWER, "", answer_id=kept.answer_id))
        # ... and the finished message in its place shows them once, on the kept answer.
        shown = slack.shown(CHANNEL, stop.params["ts"])
        assert shown is not None and the_feedback(shown)[0] == kept.answer_id

        await slack.click_feedback(CHANNEL, streaming.ANA, shown, up=True)
        await slack.wait_until(lambda: slack.ephemerals(CHANNEL), what="the 👍's thanks")
        await slack.click_feedback(CHANNEL, streaming.ANA, shown, up=False)
        await slack.wait_until(slack.opened_views, timeout=ACK_LIMIT_S, what="the feedback form")
        await running.handling.wait_idle()
        [record] = bot.engine.answers(streaming.key())
        assert record.votes == {streaming.ANA: -1}
        assert not slack.rejected(), slack.rejected()

    streaming.run(stub, embedder, tmp_path, body)
