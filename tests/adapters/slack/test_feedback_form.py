"""The feedback form a 👎 opens on Slack, end to end: the real slack-bolt app against the stand-in.

As in ``test_app.py`` (whose helpers these tests share): slack-bolt and slack_sdk talk over
127.0.0.1 to ``testkit/slack_api.py``; the bot is the real ``Assistant`` with the real engine
on embedded Chroma. A 👎 opens the modal (``views.open``) and records the vote; the submitted
form becomes a ``Feedback``, whose private reply is an ephemeral message in the answer's thread.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from adapters.slack.app import SlackRunning
from adapters.slack.feedback_form import (
    ACTION_CORRECTION,
    ACTION_REASON,
    BLOCK_CORRECTION,
    BLOCK_REASON,
    CALLBACK_FEEDBACK,
    MAX_METADATA,
    Submission,
    feedback,
    feedback_view,
    submission,
)
from adapters.slack.payload import Origin
from bot.neutral import Feedback, Person
from bot.runtime import Assistant
from raptor_engine.engine import Engine
from raptor_engine.types import SourceKind
from testkit.slack_api import BOT_USER, TEAM, SlackStandIn
from tests.adapters.recording import recorded
from tests.adapters.slack.test_app import (
    ACK_LIMIT_S,
    ANA,
    BEN,
    CHANNEL,
    MODES,
    ON_CALL,
    key,
    run,
    settle,
    share_sample,
)

WRONG = "It leaves out who approves rollbacks."
RIGHT = "The on-call engineer answers pages within 15 minutes and owns every production rollback that week."


async def ask(slack: SlackStandIn, user: str, text: str = ON_CALL) -> tuple[dict[str, Any], dict[str, Any], str]:
    """``user`` mentions the bot with ``text``: the question's message, the answer as Slack keeps it
    (what a click carries), and the answer's id (named in the values of its native 👍/👎)."""
    asked, _ = await slack.user_says(CHANNEL, user, f"<@{BOT_USER}> {text}")
    [answer] = await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="the answer")
    [feedback] = [b for b in answer["blocks"] if b["type"] == "context_actions"]
    posted = next(m for m in slack.messages[CHANNEL] if m.get("thread_ts") == asked["ts"] and m["user"] == BOT_USER)
    return asked, posted, str(feedback["elements"][0]["negative_button"]["value"]).removeprefix("down:")


async def open_form(slack: SlackStandIn, user: str, posted: dict[str, Any], answer_id: str) -> dict[str, Any]:
    """``user`` clicks 👎 on the answer; the modal it opened (checked to have arrived within
    the trigger's 3 s, and the click acknowledged within Slack's limit)."""
    before = len(slack.opened_views())
    delivery = await slack.click_feedback(CHANNEL, user, posted, up=False)
    assert answer_id in json.dumps(posted["blocks"])
    assert delivery.status == 200 and delivery.seconds < ACK_LIMIT_S
    await slack.wait_until(lambda: len(slack.opened_views()) > before, timeout=ACK_LIMIT_S, what="the feedback form")
    call = slack.calls_of("views.open")[-1]
    assert call.ok and call.at - delivery.sent_at < ACK_LIMIT_S and call.params["trigger_id"]
    return slack.opened_views()[-1]


def typed(reason: str = "", correction: str = "") -> dict[str, dict[str, str]]:
    return {BLOCK_REASON: {ACTION_REASON: reason}, BLOCK_CORRECTION: {ACTION_CORRECTION: correction}}


@pytest.mark.parametrize("mode", MODES)
def test_thumbs_down_opens_the_form_and_its_reason_is_stored_with_the_answer(engine: Engine, tmp_path: Path,
                                                                             mode: str) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await share_sample(slack)
        await settle(running, bot)
        events = recorded(bot)
        asked, posted, answer_id = await ask(slack, BEN)

        view = await open_form(slack, BEN, posted, answer_id)
        assert view["callback_id"] == CALLBACK_FEEDBACK and view["title"]["text"] == "What was wrong?"
        assert json.loads(view["private_metadata"]) == {"answer": answer_id, "channel": CHANNEL,
                                                        "thread": asked["ts"]}
        labels = [b["label"]["text"] for b in view["blocks"]]
        assert labels[0] == "What was wrong?" and labels[1].startswith("The right answer (optional")
        assert all(b["optional"] and b["element"]["multiline"] for b in view["blocks"])
        # The click is a 👎 at once, whether or not the form is sent; the form speaks instead of a thanks.
        await settle(running, bot)
        assert not slack.ephemerals(CHANNEL)
        [record] = engine.answers(key())
        assert record.votes == {BEN: -1} and not record.reasons

        # A member's right answer is kept out of the sources; the reason is stored with the answer.
        delivery = await slack.submit_view(BEN, view, typed(WRONG, RIGHT))
        assert delivery.status == 200 and delivery.body in ("", "{}")  # an empty ack closes the modal
        assert delivery.seconds < ACK_LIMIT_S
        [reply] = await slack.wait_until(lambda: slack.ephemerals(CHANNEL), what="the feedback's reply")
        assert reply["user"] == BEN and reply["thread_ts"] == asked["ts"]
        assert "Only a channel admin's right answer becomes a source" in reply["text"], reply["text"]
        await settle(running, bot)
        [record] = engine.answers(key())
        assert record.reasons == {BEN: WRONG} and record.votes == {BEN: -1}
        assert SourceKind.CORRECTION not in {s.kind for s in engine.sources(key())}
        [feedback] = [e for e in events if isinstance(e, Feedback)]
        assert (feedback.person.id, feedback.answer_id, feedback.reason, feedback.correction) == (
            BEN, answer_id, WRONG, RIGHT)

        # Ben gave his reason in a private form: the admin's report of it is Ana's eyes only.
        posted_before = len(slack.posts(CHANNEL))
        assert (await slack.slash(CHANNEL, ANA, "feedback")).status == 200
        [report] = await slack.wait_until(lambda: [e for e in slack.ephemerals(CHANNEL) if e["user"] == ANA],
                                          what="the feedback report")
        assert WRONG in report["text"], report["text"]
        await settle(running, bot)
        assert len(slack.posts(CHANNEL)) == posted_before
        assert WRONG not in json.dumps(slack.messages[CHANNEL])

    run(engine, tmp_path, mode, body)


def test_an_admins_right_answer_is_cited_next_time_and_an_empty_form_still_counts(engine: Engine,
                                                                                 tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await share_sample(slack)
        await settle(running, bot)
        asked, posted, answer_id = await ask(slack, BEN)
        assert "Correction:" not in json.dumps(slack.posts(CHANNEL, asked["ts"]))

        # Both fields left blank: the 👎 is recorded, with an empty reason.
        view = await open_form(slack, BEN, posted, answer_id)
        await slack.submit_view(BEN, view, typed())
        await settle(running, bot)
        [record] = engine.answers(key())
        assert record.votes == {BEN: -1} and record.reasons == {BEN: ""}

        view = await open_form(slack, ANA, posted, answer_id)
        await slack.submit_view(ANA, view, typed(correction=RIGHT))
        await slack.wait_until(lambda: any("is a source of this channel now" in e["text"]
                                           for e in slack.ephemerals(CHANNEL)), what="the correction's reply")
        await settle(running, bot)
        [correction] = [s for s in engine.sources(key()) if s.kind is SourceKind.CORRECTION]
        assert correction.title == f"Correction: {ON_CALL}" and "Ana" in correction.added_by

        again, _, _ = await ask(slack, BEN)
        cited = json.dumps(slack.posts(CHANNEL, again["ts"]))
        assert f"Correction: {ON_CALL}" in cited, cited

    run(engine, tmp_path, "socket", body)


def test_malformed_submissions_are_dropped_with_a_log_line(engine: Engine, tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await share_sample(slack)
        await settle(running, bot)
        events = recorded(bot)
        _, posted, answer_id = await ask(slack, BEN)
        view = await open_form(slack, BEN, posted, answer_id)
        await settle(running, bot)
        before = len(slack.ephemerals())
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="adapters.slack.handling"):
            for garbled in ({"private_metadata": "{not json"}, {"private_metadata": ""},
                            {"private_metadata": json.dumps({"answer": answer_id})},  # no channel
                            {"private_metadata": "[1, 2]"}, {"callback_id": "raptor_something_else"}):
                delivery = await slack.submit_view(BEN, view, typed(WRONG), **garbled)
                assert delivery.status == 200, garbled  # acknowledged (the modal closes), then dropped
            await settle(running, bot)
        dropped = [r for r in caplog.records if "no readable feedback form was dropped" in r.getMessage()]
        assert len(dropped) == 5, [r.getMessage() for r in caplog.records]
        assert not [e for e in events if isinstance(e, Feedback)] and len(slack.ephemerals()) == before
        [record] = engine.answers(key())
        assert not record.reasons

    run(engine, tmp_path, "socket", body)


# -- the pure translation ---------------------------------------------------------------------


def test_the_form_and_its_submission_translate_without_trusting_the_payload() -> None:
    origin = Origin(TEAM, CHANNEL, BEN, ts="2.0", thread_ts="1.0")
    view = feedback_view(origin, "a1")
    assert view is not None and len(view["private_metadata"]) <= MAX_METADATA
    assert feedback_view(origin, "a" * MAX_METADATA) is None  # over Slack's limit: a plain 👎, no form
    values = {BLOCK_REASON: {ACTION_REASON: {"type": "plain_text_input", "value": "  Outdated. "}},
              BLOCK_CORRECTION: {ACTION_CORRECTION: {"type": "plain_text_input", "value": None}}}
    body = {"type": "view_submission", "user": {"id": ANA}, "team": {"id": TEAM},
            "view": {"callback_id": CALLBACK_FEEDBACK, "private_metadata": view["private_metadata"],
                     "state": {"values": values}}}
    form = submission(body, TEAM)
    assert form == Submission(Origin(TEAM, CHANNEL, ANA, thread_ts="1.0"), "a1", "Outdated.", "")
    assert feedback(form, Person(ANA)) == Feedback(key(), Person(ANA), "a1", "Outdated.", "")
    for odd in ({}, {"type": "view_submission"}, {**body, "view": "x"}, {**body, "user": None},
                {**body, "view": {**body["view"], "private_metadata": None}},
                {**body, "view": {**body["view"], "private_metadata": '{"answer": 5, "channel": "C1"}'}},
                {**body, "view": {**body["view"], "state": "garbled"}}):
        result = submission(odd, TEAM)
        assert result is None or (result.reason, result.correction) == ("", ""), odd
