"""Sources that change after the tree was built: an edited pin, a file uploaded again.

Real components throughout (the engine on embedded Chroma, the real scheduler, the
handler), as in ``test_handler.py``, whose session helpers these tests use. What they
pin down: an edit is ONE changed source in ``status`` however often it is edited; the
answers that cited the earlier text are kept, say so in one line where they are shown
again, and still go when the source is unpinned, unless they quote text the edit removed:
those go at once; a file uploaded again under the same name replaces the earlier one only
when the configuration says so.
"""

from __future__ import annotations

from pathlib import Path

from bot import replies
from bot.cli import question_set
from bot.config import FilesConfig
from bot.neutral import Feedback, Pin, Question, ReplyKind, Unpin, Upload, Vote
from raptor_engine.engine import Engine
from raptor_engine.types import ChannelKey
from tests.bot.test_handler import ADMIN, GUEST, MANAGER, NOTE, OTHER_NOTE, Session, make_config, run

CHANGED = "This answer cites material that changed after it was given."


def status_line(status: str) -> str:
    """The line of a status reply that says what changed since the build."""
    return next((line for line in status.splitlines() if "since it was built" in line or "Up to date" in line), "")


def test_an_edited_pin_is_one_changed_source_and_its_answers_say_so(
    engine: Engine, channel: ChannelKey, tmp_path: Path
) -> None:
    question = "When are deploys frozen?"

    async def body(s: Session) -> None:
        await s.do(s.pin(NOTE, "m1"))
        await s.do(s.pin(OTHER_NOTE, "m2"))
        await s.do(s.command(MANAGER, "rebuild"))
        await s.scheduler.wait_idle(channel)
        assert status_line((await s.do(s.command(GUEST, "status"))).text) == "Up to date with its sources."

        answer = await s.do(Question(channel, GUEST, question, "t-answer"))
        assert answer.answer_id and "Fridays" in answer.text and answer.thread == "t-answer"
        before = await s.do(Vote(channel, GUEST, answer.answer_id, up=True))
        assert CHANGED not in before.text  # nothing it cites has changed yet

        told_before = len(s.sent)
        # Edits that add to the note: the answer quotes nothing they removed, so it is kept.
        await s.do(Pin(channel, GUEST, f"{NOTE} Exceptions need Ana's approval.", "m1", author="Ana", edited=True))
        updated, notice = s.sent[told_before:]
        assert "1 answer given before cited the earlier text" in updated.text, updated.text
        assert not updated.thread  # where the edit happened
        assert notice.thread == "t-answer" and notice.text.startswith(replies.CHANGED_ANSWER), notice  # the answer's thread
        status = (await s.do(s.command(GUEST, "status"))).text
        assert status_line(status).startswith("1 source changed since it was built (edited or replaced);"), status
        told_before = len(s.sent)
        await s.do(Pin(channel, GUEST, f"{NOTE} Exceptions need Ben's approval.", "m1", author="Ana", edited=True))
        assert [r.thread for r in s.sent[told_before:]] == [""]  # the answer's thread was told already
        status = (await s.do(s.command(GUEST, "status"))).text
        assert status_line(status).startswith("1 source changed since it was built (edited or replaced);"), status

        (kept,) = engine.answers(channel)  # kept, not deleted with the old text, and marked
        assert kept.answer_id == answer.answer_id and kept.changed and kept.ups == 1
        (current,) = engine.sources(channel, external_id="m1")
        assert kept.source_ids == (current.id,)  # it now stands with the current version
        thanks = await s.do(Vote(channel, MANAGER, answer.answer_id, up=True))
        assert thanks.text.splitlines()[-1].endswith(CHANGED), thanks.text
        told = await s.do(Feedback(channel, GUEST, answer.answer_id, "It says Fridays."))
        assert told.text.splitlines()[-1].endswith(CHANGED), told.text
        report = await s.do(s.command(ADMIN, "feedback"))
        assert f"“{question}”" in report.text and CHANGED in report.text
        assert '"changed": true' in "".join(question_set([kept]))

        # An edit that removes what the answer quotes ("Fridays"): the answer goes with the old text.
        await s.do(Pin(channel, GUEST, NOTE.replace("Fridays", "Wednesdays"), "m1", author="Ana", edited=True))
        assert [a.answer_id for a in engine.answers(channel)] == []
        fresh = await s.do(Question(channel, GUEST, question))
        assert "Wednesdays" in fresh.text and "Fridays" not in fresh.text  # what the bot knows changed
        assert not next(a for a in engine.answers(channel) if a.answer_id == fresh.answer_id).changed

        await s.do(s.pin("The on-call rota changes every Monday at nine.", "m3"))
        status = (await s.do(s.command(GUEST, "status"))).text
        assert status_line(status).startswith("2 sources changed since it was built (1 edited or replaced, "
                                              "1 added or removed);"), status

        await s.do(Unpin(channel, GUEST, "m1"))  # unpinned: its answers go with it, old and new
        assert [a.answer_id for a in engine.answers(channel)] == []
        status = (await s.do(s.command(GUEST, "status"))).text
        assert status_line(status).startswith("2 sources changed since it was built (added or removed);"), status

        await s.do(s.command(MANAGER, "rebuild"))
        await s.scheduler.wait_idle(channel)
        assert status_line((await s.do(s.command(GUEST, "status"))).text) == "Up to date with its sources."

    run(engine, make_config(tmp_path, channel), channel, body)


def policy(day: str) -> bytes:
    return f"# Expense policy\n\nReceipts are due by the {day} of each month, scanned as PDF.\n".encode()


def test_a_file_uploaded_again_replaces_it_when_configured(engine: Engine, channel: ChannelKey, tmp_path: Path) -> None:
    question = "When are receipts due?"

    async def body(s: Session) -> None:
        await s.do(Upload(channel, GUEST, "policy.md", policy("fifth")))
        first = await s.do(Question(channel, GUEST, question))
        assert "fifth" in first.text

        replaced = await s.do(Upload(channel, GUEST, "policy.md", policy("tenth")))
        assert replaced.kind is ReplyKind.INFO
        assert replaced.text.startswith("Replaced the earlier file named “policy.md” with this one"), replaced.text
        assert "1 answer given before cited the earlier text" in replaced.text
        (source,) = engine.sources(channel)
        assert source.file_name == "policy.md"
        again = await s.do(Question(channel, GUEST, question))
        assert "tenth" in again.text and "fifth" not in again.text
        # The first answer quoted the "fifth" the new version no longer says: it went with it.
        assert [a.answer_id for a in engine.answers(channel)] == [again.answer_id]

        other = await s.do(Upload(channel, GUEST, "travel.md", b"# Travel\n\nBook trains, not planes, under 600 km.\n"))
        assert other.text.startswith("Added “Travel”")
        assert len(engine.sources(channel)) == 2  # another name: added beside it

    config = make_config(tmp_path, channel)
    config = config.model_copy(update={"files": FilesConfig(replace_same_name=True)})
    run(engine, config, channel, body)


def test_by_default_a_file_uploaded_again_is_kept_beside_the_earlier_one(
    engine: Engine, channel: ChannelKey, tmp_path: Path
) -> None:
    async def body(s: Session) -> None:
        await s.do(Upload(channel, GUEST, "policy.md", policy("fifth")))
        added = await s.do(Upload(channel, GUEST, "policy.md", policy("tenth")))
        assert added.text.startswith("Added “Expense policy”"), added.text
        assert len(engine.sources(channel)) == 2
        assert replies.CHANGED_ANSWER.endswith(CHANGED)

    run(engine, make_config(tmp_path, channel), channel, body)


def test_a_pinned_thread_that_grew_is_updated_quietly_and_its_answers_are_told(
    engine: Engine, channel: ChannelKey, tmp_path: Path
) -> None:
    async def body(s: Session) -> None:
        root, first = "How do we roll back a release?", "Run the rollback job from the release page."
        await s.do(s.pin(root, "t1", (first,)))
        answer = await s.do(Question(channel, GUEST, "How do we roll back?", "t-q"))
        assert answer.answer_id and answer.citations

        later = "Then tell the release channel within ten minutes."
        before = len(s.sent)
        await s.handler.handle(Pin(channel, GUEST, root, "t1", author="Ana", replies=(first, later), edited=True,
                                   grew=True), s.send)
        (source,) = engine.sources(channel)
        assert later in engine.store.channel(channel).source_text(source.id)
        told = s.sent[before:]
        assert [r.thread for r in told] == ["t-q"] and told[0].text.startswith(replies.CHANGED_ANSWER), told

    run(engine, make_config(tmp_path, channel), channel, body)
