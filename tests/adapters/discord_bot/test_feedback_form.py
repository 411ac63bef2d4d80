"""The feedback form a 👎 opens on Discord: its pure half (building the modal, reading a
submission) and, end to end, the real discord.py client against the stand-in (see
``conftest.py``): the 👎 press answered with the modal (callback type 9) carrying the
answer id, the 👎 counted even if the form is never submitted, the reason stored with the
answer, a moderator's right answer becoming a cited source while a plain member's does
not, and a garbled submission dropped with a log line.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from adapters.discord_bot import feedback_form, translate
from adapters.discord_bot.feedback_form import CORRECTION_ID, FORM_TITLE, REASON_ID, Submission, Unreadable
from adapters.discord_bot.translate import Place
from bot.neutral import Feedback, Person
from raptor_engine.engine import Engine
from raptor_engine.types import SourceKind
from testkit.discord_api import (
    EPHEMERAL,
    MODAL_CALLBACK,
    custom_ids,
    message_text,
    modal_errors,
    modal_submit_data,
)
from tests.adapters.discord_bot.conftest import World, run_world
from tests.adapters.discord_bot.test_client import ON_CALL_QUESTION, add_handbook

RIGHT_ANSWER = "The on-call engineer answers the pager within five minutes and writes the incident log."


# -- the pure half --------------------------------------------------------------------------------


def test_the_form_fits_discords_limits_and_carries_the_answer_id() -> None:
    async def build() -> dict[str, Any]:  # discord.py's views need a running loop
        form = feedback_form.form_for("a" * 40)
        assert form is not None and form.is_finished()  # never kept in the view store
        return form.to_dict()

    shown = asyncio.run(build())
    assert shown["custom_id"] == "raptor:feedback:" + "a" * 40 and shown["title"] == FORM_TITLE
    inputs = [item for row in shown["components"] for item in row["components"]]
    assert [(i["custom_id"], i["style"], i["required"]) for i in inputs] == [(REASON_ID, 2, False),
                                                                             (CORRECTION_ID, 2, False)]
    assert [i["label"] for i in inputs] == ["What was wrong?", "The right answer (optional)"]
    assert modal_errors(shown, 3) is None  # the stand-in's check of Discord's limits
    assert modal_errors(shown, 5) is not None  # a modal never answers a modal
    assert modal_errors({**shown, "title": "x" * 46}, 3) is not None

    # Any answer id the 👎 button's custom id holds fits the form's.
    longest = "b" * (translate.CUSTOM_ID_LIMIT - len("raptor:vote:down:"))
    assert translate.vote_custom_id(longest, False) is not None
    assert feedback_form.form_custom_id(longest) is not None
    assert feedback_form.form_custom_id("") is None
    assert feedback_form.form_custom_id("c" * translate.CUSTOM_ID_LIMIT) is None


def test_a_submission_is_read_from_rows_or_labels() -> None:
    rows = modal_submit_data("raptor:feedback:a1", {REASON_ID: "  outdated  ", CORRECTION_ID: "Use v2."})
    assert feedback_form.parse_submission(rows) == Submission("a1", "outdated", "Use v2.")
    only_reason = modal_submit_data("raptor:feedback:a1", {REASON_ID: "wrong team"})
    assert feedback_form.parse_submission(only_reason) == Submission("a1", "wrong team", "")
    labels = {"custom_id": "raptor:feedback:a2", "components": [
        {"type": 18, "component": {"type": 4, "custom_id": CORRECTION_ID, "value": "Right."}},
        {"type": 1, "components": [{"type": 2, "custom_id": "x"}]},  # not a text input: ignored
    ]}
    assert feedback_form.parse_submission(labels) == Submission("a2", "", "Right.")

    place, person = Place(1, 2), Person("7", "Alice")
    event = feedback_form.feedback_event(Submission("a1", "outdated", "Use v2."), place, person)
    assert event == Feedback(place.key, person, "a1", "outdated", "Use v2.")


@pytest.mark.parametrize(("data", "ours"), [
    ({"custom_id": "raptor:feedback:", "components": []}, True),  # no answer id
    ({"custom_id": "other:thing", "components": []}, False),
    ({"custom_id": "raptor:feedback:a1", "components": "reason=x"}, True),
    ({"custom_id": "raptor:feedback:a1", "components": [{"type": 1, "components": [{"type": 4, "value": "x"}]}]}, True),
    ({"custom_id": "raptor:feedback:a1", "components": [{"type": 1, "components": [
        {"type": 4, "custom_id": REASON_ID, "value": 5}]}]}, True),
    ({"custom_id": "raptor:feedback:a1", "components": [{"type": 7}]}, True),
    ({"custom_id": "raptor:feedback:a1", "components": [None]}, True),
    ({"custom_id": None}, False),
])
def test_a_malformed_submission_is_unreadable_or_not_the_bots(data: dict[str, Any], ours: bool) -> None:
    parsed = feedback_form.parse_submission(data)
    assert isinstance(parsed, Unreadable) if ours else parsed is None


# -- end to end -----------------------------------------------------------------------------------


def is_ephemeral(message: dict[str, Any]) -> bool:
    return bool(message["flags"] & EPHEMERAL)


async def ask(world: World) -> tuple[dict[str, Any], str]:
    """``/raptor ask`` of the on-call question in general; the answer and its id."""
    asked = await world.slash("general", "ask", {"question": ON_CALL_QUESTION})
    answer = (await world.replies(asked))[0]
    down = next(c for c in custom_ids(answer) if c.startswith("raptor:vote:down:"))
    return answer, down.removeprefix("raptor:vote:down:")


async def record_of(world: World, answer_id: str, condition: Any) -> Any:
    """The kept answer ``answer_id`` of general, once ``condition(record)`` holds."""
    key = world.key("general")
    return await world.fake.wait_for(
        lambda: next((r for r in world.engine.answers(key) if r.answer_id == answer_id and condition(r)), None))


def test_thumbs_down_opens_the_form_and_its_reason_is_stored(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake = world.fake
        await add_handbook(world)
        answer, answer_id = await ask(world)

        pressed = await fake.click(answer, world.alice, f"raptor:vote:down:{answer_id}")
        await fake.wait_for(lambda: pressed.callback_type is not None)
        assert pressed.callback_type == MODAL_CALLBACK  # the modal is the acknowledgement, nothing deferred
        assert pressed.callback_at is not None and pressed.callback_at - pressed.dispatched_at < 3
        assert pressed.modal is not None
        assert pressed.modal["custom_id"] == f"raptor:feedback:{answer_id}"
        assert pressed.modal["title"] == FORM_TITLE
        # The 👎 counts already: a dismissed form still leaves it.
        record = await record_of(world, answer_id, lambda r: r.downs == 1)
        assert record.votes == {world.alice["user"]["id"]: -1} and not record.reasons
        assert pressed.messages == []  # nothing follows a modal

        submitted = await fake.submit(pressed, world.alice, {REASON_ID: "It leaves out the escalation policy."})
        (said,) = await world.replies(submitted)
        assert submitted.callback_type == 5 and is_ephemeral(said)
        assert said["content"].startswith("Thanks, your feedback is stored")
        record = await record_of(world, answer_id, lambda r: r.reasons)
        assert record.reasons == {world.alice["user"]["id"]: "It leaves out the escalation policy."}
        assert record.votes == {world.alice["user"]["id"]: -1}

    run_world(engine, tmp_path, body)


def test_a_moderators_right_answer_becomes_a_cited_source(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, key = world.fake, world.key("general")
        await add_handbook(world)
        answer, answer_id = await ask(world)

        # A plain member's right answer is thanked for, not kept as a source.
        pressed = await fake.click(answer, world.alice, f"raptor:vote:down:{answer_id}")
        await fake.wait_for(lambda: pressed.modal is not None)
        submitted = await fake.submit(pressed, world.alice, {REASON_ID: "incomplete", CORRECTION_ID: RIGHT_ANSWER})
        (said,) = await world.replies(submitted)
        assert is_ephemeral(said) and "Only a channel admin's right answer becomes a source" in said["content"]
        assert [s.kind for s in world.engine.sources(key)] == [SourceKind.FILE]

        # A moderator's (Manage Messages) becomes a source of the channel, cited by the next answer.
        pressed = await fake.click(answer, world.mod, f"raptor:vote:down:{answer_id}")
        await fake.wait_for(lambda: pressed.modal is not None)
        submitted = await fake.submit(pressed, world.mod, {CORRECTION_ID: RIGHT_ANSWER})
        (said,) = await world.replies(submitted, timeout=30.0)
        assert is_ephemeral(said) and "Your right answer is a source of this channel now" in said["content"]
        corrections = [s for s in world.engine.sources(key) if s.kind is SourceKind.CORRECTION]
        assert [s.title for s in corrections] == [f"Correction: {ON_CALL_QUESTION}"]
        record = await record_of(world, answer_id, lambda r: len(r.votes) == 2)
        assert record.votes == {world.alice["user"]["id"]: -1, world.mod["user"]["id"]: -1}
        assert record.reasons == {world.alice["user"]["id"]: "incomplete", world.mod["user"]["id"]: ""}

        again, _ = await ask(world)
        assert f"Correction: {ON_CALL_QUESTION}" in message_text(again)

    run_world(engine, tmp_path, body)


def test_a_garbled_submission_is_dropped_with_a_log_line(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)

    async def body(world: World) -> None:
        fake = world.fake
        await add_handbook(world)
        _, answer_id = await ask(world)
        garbled = modal_submit_data(f"raptor:feedback:{answer_id}", {REASON_ID: "x"})
        garbled["components"][0]["components"][0].pop("custom_id")
        dropped = await fake.submit_modal(world.channel("general"), world.alice, garbled)
        await fake.wait_for(lambda: "dropped a garbled feedback form submission" in caplog.text)
        nameless = await fake.submit_modal(world.channel("general"), world.alice,
                                           modal_submit_data("raptor:feedback:", {REASON_ID: "x"}))
        await fake.wait_for(lambda: "naming no answer" in caplog.text)

        # Nothing answered, nothing stored; the client still serves.
        assert dropped.callback_type is None and nameless.callback_type is None
        (record,) = [r for r in world.engine.answers(world.key("general")) if r.answer_id == answer_id]
        assert not record.reasons and not record.votes
        status = await world.slash("general", "status")
        assert "1 source in this channel" in message_text((await world.replies(status))[0])

    run_world(engine, tmp_path, body)


def test_a_submission_is_answered_once_by_the_person_it_names(engine: Engine, tmp_path: Path) -> None:
    """The form's custom id is all a submission needs: one made up from the id alone (as any
    front-end, or this one after a restart, receives it) is handled like a shown form's."""
    async def body(world: World) -> None:
        fake = world.fake
        await add_handbook(world)
        _, answer_id = await ask(world)
        data = modal_submit_data(f"raptor:feedback:{answer_id}", {REASON_ID: "stale", CORRECTION_ID: ""})
        submitted = await fake.submit_modal(world.channel("general"), world.alice, data)
        (said,) = await world.replies(submitted)
        assert said["content"].startswith("Thanks, your feedback is stored")
        record = await record_of(world, answer_id, lambda r: r.reasons)
        assert record.reasons == {world.alice["user"]["id"]: "stale"}

    run_world(engine, tmp_path, body)

