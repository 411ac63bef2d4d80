"""The console channel driven in-process, line by line, as a person would type it.

Real components only: the real engine on embedded Chroma (the session's
packaged model), the real scheduler and handler. Each test runs its own event
loop with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from PIL import Image

from adapters.console.app import ConsoleChannel, FeedbackPrompt
from adapters.console.translate import LineContext, Notice, Quit, parse_line, render_reply
from bot.cli import main
from bot.config import Config, ConsoleConfig
from bot.engine_calls import AsyncEngine
from bot.neutral import (
    CitationKind,
    CitationView,
    Command,
    Person,
    Pin,
    Question,
    Reply,
    ReplyAddress,
    ReplyKind,
    Unpin,
    Upload,
)
from bot.replies import NO_MATERIAL
from bot.runtime import Assistant
from bot.tree_picture import PICTURE_SIZE
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine, EngineSettings
from raptor_engine.store import ChromaStore
from raptor_engine.types import ChannelKey
from tests.adapters.recording import counted, our_warnings, question_outcomes
from tests.conftest import REPO, SAMPLE, make_engine

ON_CALL_QUESTION = "What does the on-call engineer do?"  # a detail: answered from excerpts
OVERVIEW_QUESTION = "What are the main points about on-call?"  # answered with a summary once the tree is built
CITATION = re.compile(r"^\[(\d+)\] (excerpt|summary \(layer (\d+)\)) · (.*) \(node (\S+)\)$", re.M)


class Terminal:
    """A ConsoleChannel's output: every message written, in order."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def write(self, text: str) -> None:
        self.messages.append(text)

    def take(self) -> str:
        """Everything written since the last take."""
        text = "\n".join(self.messages)
        self.messages.clear()
        return text


def console_config(tmp_path: Path, sample: bool = False) -> Config:
    return Config(data_dir=tmp_path / "data", console=ConsoleConfig(sample=sample))


def with_bot(engine: Engine, config: Config, body: Callable[[Assistant], Awaitable[None]]) -> None:
    """Runs ``body`` with a started bot on the test's engine, and stops the bot after."""

    async def session() -> None:
        bot = Assistant(config, AsyncEngine(engine))
        await bot.start(warm_up=False)  # the rebuilds below compile UMAP anyway
        try:
            await body(bot)
        finally:
            await bot.stop()

    asyncio.run(session())


def citations(text: str) -> list[tuple[str, str, str]]:
    """(kind, title, node id) of each citation line printed under an answer."""
    return [(m.group(2).split(" ")[0], m.group(4), m.group(5)) for m in CITATION.finditer(text)]


def test_bad_asks_what_was_wrong_and_the_right_answer_then_cites_it(engine: Engine, tmp_path: Path) -> None:
    terminal = Terminal()
    question = "How long does the on-call rotation last?"

    async def body(bot: Assistant) -> None:
        console = ConsoleChannel(bot, terminal.write)
        await console.start()
        await console.handle_line("/bad")
        assert "no answer to rate yet" in terminal.take()
        await console.handle_line(f"/upload {SAMPLE}")
        await console.handle_line(question)
        terminal.take()
        await console.handle_line("/good")
        assert "your 👍 is recorded" in terminal.take()
        await console.handle_line("/bad")
        assert FeedbackPrompt.ASK_REASON in terminal.take()
        await console.handle_line("It does not say when the rotation starts.")  # not a question: the prompt's
        assert FeedbackPrompt.ASK_CORRECTION in terminal.take()
        await console.handle_line("One week, starting every Monday at ten in the morning.")
        assert "is a source of this channel now" in terminal.take()  # the person at the console is an admin
        (record,) = engine.answers(console.key)
        assert record.reasons == {console.person.id: "It does not say when the rotation starts."}
        await console.handle_line(question)
        assert f"Correction: {question}" in terminal.take()

    with_bot(engine, console_config(tmp_path), body)


def test_upload_ask_rebuild_node_tree_forget(engine: Engine, tmp_path: Path) -> None:
    terminal = Terminal()

    async def body(bot: Assistant) -> None:
        console = ConsoleChannel(bot, terminal.write)
        await console.start()
        assert "no material yet" in terminal.take()

        assert await console.handle_line(f"/upload {SAMPLE}")
        assert "Added “The Aurora Team Handbook” (" in terminal.take()
        await console.handle_line("/pin The staging database is refreshed from production every Sunday night.")
        assert "console-pin-1" in terminal.take()

        await console.handle_line(ON_CALL_QUESTION)  # before any rebuild: excerpts only
        answer = terminal.take()
        cited = citations(answer)
        assert cited and {kind for kind, _, _ in cited} == {"excerpt"}, answer
        # Its title, how old the source is, then the quote.
        aged = re.compile(r"The Aurora Team Handbook · updated (just now|\d+ minutes? ago) — “")
        assert all(aged.match(title) for _, title, _ in cited), cited
        assert "[1]" in answer.splitlines()[0]  # the answer text carries its citation numbers

        await console.handle_line("/rebuild")
        assert "Rebuild started" in terminal.take()
        await bot.scheduler.wait_idle(console.key)
        assert "Rebuilt: tree v1 from 2 sources" in terminal.take()

        await console.handle_line(OVERVIEW_QUESTION)
        answer = terminal.take()
        summaries = [node for kind, _, node in citations(answer) if kind == "summary"]
        assert summaries, answer

        # A cited summary opens down, layer by layer, to the excerpts it was built from.
        node = summaries[0]
        child = None
        for _ in range(6):
            await console.handle_line(f"/node {node}")
            shown = terminal.take()
            assert re.match(rf"Summary \(layer \d+\) {re.escape(node)}", shown), shown
            assert re.search(r"Summarises \(\d+\):", shown)
            child = re.search(r"^  (\S+) · excerpt · ", shown, re.M)
            if child:
                break
            lower = re.search(r"^  (\S+) · summary", shown, re.M)
            assert lower, shown
            node = lower.group(1)
        assert child, shown
        await console.handle_line(f"/node {child.group(1)}")  # down to the excerpt itself
        assert terminal.take().startswith(f"Excerpt {child.group(1)}")

        await console.handle_line("/tree")
        shown = terminal.take()
        saved = re.search(r"^Tree picture saved to (.+\.png)$", shown, re.M)
        assert saved and "tree v1" in shown, shown
        with Image.open(saved.group(1)) as picture:
            assert picture.size == PICTURE_SIZE
        assert Path(saved.group(1)).parent == (tmp_path / "data" / "pictures").resolve()

        await console.handle_line("/status")
        assert "2 sources in this channel; tree v1 built " in terminal.take()

        await console.handle_line("/sources")
        listed = terminal.take()
        short_id = re.search(r"^([0-9a-f]{12})  “The Aurora Team Handbook”", listed, re.M)
        assert short_id, listed
        await console.handle_line(f"/forget {short_id.group(1)}")
        assert "Forgot “The Aurora Team Handbook”" in terminal.take()
        await console.handle_line("/sources")
        listed = terminal.take()
        assert "Aurora" not in listed and "staging database" in listed
        await console.handle_line(ON_CALL_QUESTION)
        assert "Aurora" not in terminal.take()
        await console.handle_line("When is the staging database refreshed?")
        assert citations(terminal.take())  # the other source still answers
        await console.handle_line("/status")
        assert "1 source changed since it was built (added or removed)" in terminal.take()

        assert not await console.handle_line("/quit")

    with_bot(engine, console_config(tmp_path), body)


def test_a_question_where_there_is_no_material_says_what_to_add(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A question, ``/ask``, and a question after the only pin was unpinned, at a console holding
    no source: exactly ``NO_MATERIAL`` (not "could not find anything": nothing was searched; not
    an error line with a reference), counted as ``no_material`` and logged as no failure."""
    terminal = Terminal()

    async def body(bot: Assistant) -> None:
        console = ConsoleChannel(bot, terminal.write)
        await console.start()
        terminal.take()
        await console.handle_line(ON_CALL_QUESTION)
        assert terminal.take() == NO_MATERIAL
        await console.handle_line(f"/ask {ON_CALL_QUESTION}")
        assert terminal.take() == NO_MATERIAL
        await console.handle_line("/pin The on-call engineer carries the pager for a week.")
        await console.handle_line("/unpin console-pin-1")
        assert "Removed “you: The on-call engineer" in terminal.take()
        await console.handle_line(ON_CALL_QUESTION)  # all its material gone: the same, not "not found"
        assert terminal.take() == NO_MATERIAL
        assert question_outcomes(bot, "console") == {"no_material": 3}
        assert counted(bot, "raptor_errors_total") == {}

    with caplog.at_level(logging.INFO):
        with_bot(engine, console_config(tmp_path), body)
    assert our_warnings(caplog.records) == []


def test_two_channels_never_see_each_other(engine: Engine, tmp_path: Path) -> None:
    terminal_a, terminal_b = Terminal(), Terminal()

    async def body(bot: Assistant) -> None:
        a = ConsoleChannel(bot, terminal_a.write, channel="alpha")
        b = ConsoleChannel(bot, terminal_b.write, channel="beta")
        await a.handle_line(f"/upload {SAMPLE}")
        await b.handle_line("/pin The staging database is refreshed from production every Sunday night.")
        shown = terminal_b.take()
        assert "Added “you: The staging database is refreshed from production every…”" in shown
        assert "(pinned as console-pin-1; /unpin console-pin-1 removes it)" in shown

        await b.handle_line(ON_CALL_QUESTION)
        assert "Aurora" not in terminal_b.take()
        await a.handle_line("When is the staging database refreshed?")
        assert "staging database" not in terminal_a.take()
        await b.handle_line("When is the staging database refreshed?")
        assert "every Sunday night. [1]" in terminal_b.take()

        await a.handle_line("/sources")
        await b.handle_line("/sources")
        assert "Aurora" in terminal_a.take()
        listed_b = terminal_b.take()
        assert "staging" in listed_b and "Aurora" not in listed_b

        await b.handle_line("/unpin console-pin-1")
        assert "Removed “you: The staging database" in terminal_b.take()
        await a.handle_line("/sources")
        assert "Aurora" in terminal_a.take()  # alpha untouched by beta's unpin

    with_bot(engine, console_config(tmp_path), body)


def test_bad_uploads_are_clear_messages(engine: Engine, tmp_path: Path) -> None:
    terminal = Terminal()
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    binary = tmp_path / "blob.txt"
    binary.write_bytes(bytes(range(256)) * 40)
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))

    async def body(bot: Assistant) -> None:
        console = ConsoleChannel(bot, terminal.write)
        assert await console.handle_line(f"/upload {tmp_path / 'missing.md'}")
        assert terminal.take() == f"! There is no file {tmp_path / 'missing.md'}."
        assert await console.handle_line(f"/upload {tmp_path}")
        assert "is a folder" in terminal.take()
        assert await console.handle_line("/upload")
        assert terminal.take() == "Usage: /upload PATH"
        assert await console.handle_line(f"/upload {empty}")
        assert terminal.take() == "! I could not add “empty.txt”: the file is empty (0 bytes). Nothing was stored."
        assert await console.handle_line(f"/upload {binary}")
        shown = terminal.take()
        assert shown.startswith("! I could not add “blob.txt”:") and "Nothing was stored." in shown
        assert await console.handle_line(f"/upload {photo}")
        assert "'.png' files are not supported" in terminal.take()
        await console.handle_line("/sources")
        assert "No sources yet" in terminal.take()
        await console.handle_line("/help")
        shown = terminal.take()
        assert "forget SOURCE" in shown and "/upload PATH" in shown and "/quit" in shown
        await console.handle_line("/frobnicate now")
        assert terminal.take().startswith("I don't know the command “frobnicate”.")
        await console.handle_line("/node")
        assert terminal.take().startswith("Usage: node ID")
        await console.handle_line("/rebuild")
        assert terminal.take() == f"! {NO_MATERIAL}"

    with_bot(engine, console_config(tmp_path), body)


@pytest.mark.timeout(120)  # opening a named pipe used to block for ever
def test_oversized_upload_names_its_true_size_and_a_pipe_is_refused(
    store: ChromaStore, embedder: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    engine = make_engine(store, embedder, EngineSettings(max_file_bytes=1000))
    terminal = Terminal()
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * 5000)
    pipe = tmp_path / "pipe.txt"
    os.mkfifo(pipe)

    async def body(bot: Assistant) -> None:
        console = ConsoleChannel(bot, terminal.write)
        assert await console.handle_line(f"/upload {big}")
        assert terminal.take() == (
            "! I could not add “big.txt”: the file is 4.9 KB, over the limit of 1000 bytes. Nothing was stored."
        )
        assert await console.handle_line(f"/upload {pipe}")
        assert terminal.take() == f"! {pipe} is a named pipe, not a regular file; give the path of a saved file."

    with_bot(engine, console_config(tmp_path), body)


def test_start_adds_the_sample_once_and_pins_continue_numbering(engine: Engine, tmp_path: Path) -> None:
    terminal = Terminal()
    config = console_config(tmp_path, sample=True)

    async def body(bot: Assistant) -> None:
        console = ConsoleChannel(bot, terminal.write)
        await console.start()
        shown = terminal.take()
        assert "Added “The Aurora Team Handbook”" in shown and "What happens when the on-call" in shown
        await console.handle_line("/pin Lunch is at noon.")
        assert "console-pin-1" in terminal.take()

        again = ConsoleChannel(bot, terminal.write)  # as after a restart
        await again.start()
        assert terminal.take().startswith("Welcome back to #general: 2 source(s).")
        await again.handle_line("/pin Coffee is at three.")
        assert "console-pin-2" in terminal.take()

    with_bot(engine, config, body)


def test_the_courier_prints_replies_without_an_event(engine: Engine, tmp_path: Path) -> None:
    """Once started, the console is the bot's courier for its platform: a rebuild's progress and
    result from another process are printed as any reply, another channel's under its name."""
    terminal = Terminal()

    async def body(bot: Assistant) -> None:
        console = ConsoleChannel(bot, terminal.write)
        assert "console" not in bot.couriers
        await console.start()
        terminal.take()
        courier = bot.couriers["console"]
        progress = Reply(ReplyKind.PROGRESS, "Summarising layer 1 of 3")
        await courier(ReplyAddress(console.key))(progress)
        assert terminal.take() == render_reply(progress)
        elsewhere = ChannelKey("console", console.key.workspace, "ops")
        await courier(ReplyAddress(elsewhere))(Reply(ReplyKind.INFO, "The tree is rebuilt."))
        assert terminal.take() == "#ops:\nThe tree is rebuilt."

    with_bot(engine, console_config(tmp_path), body)


def test_translate_lines_and_replies(tmp_path: Path) -> None:
    key = ChannelKey("console", "local", "general")
    person = Person("you", manages_channel=True)
    context = LineContext(key, person, pin_number=7, max_upload_bytes=10)
    assert parse_line("   ", context) is None
    assert parse_line("How do we deploy?", context) == Question(key, person, "How do we deploy?")
    assert parse_line("help", context) == Command(key, person, "help")
    assert parse_line("/Forget  3f9a1c2b7d ", context) == Command(key, person, "forget", "3f9a1c2b7d")
    assert parse_line("/ask who is on call?", context) == Command(key, person, "ask", "who is on call?")
    assert isinstance(parse_line("/quit", context), Quit)
    assert parse_line("/pin Note", context) == Pin(key, person, "Note", "console-pin-7", author="you")
    assert parse_line("/unpin console-pin-7", context) == Unpin(key, person, "console-pin-7")
    big = tmp_path / "big.txt"
    big.write_text("x" * 100)
    upload = parse_line(f"/upload {big}", context)
    assert isinstance(upload, Upload) and len(upload.data) == 11  # the engine refuses it as too large
    assert upload.size == 100  # ...naming its true size
    assert isinstance(parse_line("/upload /no/such/file.txt", context), Notice)

    answer = Reply(
        ReplyKind.ANSWER, "Roll back first. [1] [2]", warning="Not checked.",
        citations=(
            CitationView(1, CitationKind.SUMMARY, 2, "s2.abc", "Handbook", "https://x/h", "Roll back…"),
            CitationView(2, CitationKind.EXCERPT, 0, "leaf.1", "Notes", "", "First roll back."),
        ),
    )
    assert render_reply(answer) == (
        "Roll back first. [1] [2]\n⚠ Not checked.\n\n"
        "[1] summary (layer 2) · Handbook — “Roll back…” https://x/h (node s2.abc)\n"
        "[2] excerpt · Notes — “First roll back.” (node leaf.1)"
    )
    assert render_reply(Reply(ReplyKind.PROGRESS, "Rebuilding: 3 of 9…")) == "… Rebuilding: 3 of 9…"
    assert render_reply(Reply(ReplyKind.ERROR, "Broken.", reference="abcd1234")) == "! Broken. (reference abcd1234)"


def test_python_m_bot_opens_the_chat(tmp_path: Path) -> None:
    """``python -m bot`` with no command is the chat: the sample is added and a question answered."""
    out = io.StringIO()
    stdin = io.StringIO("What happens when the on-call engineer cannot be reached?\n/quit\n")
    assert main(["--data-dir", str(tmp_path / "data")], stdin=stdin, stdout=out) == 0
    text = out.getvalue()
    assert "Added “The Aurora Team Handbook”" in text and "Welcome to #general" in text
    assert "[1] excerpt · The Aurora Team Handbook" in text and text.rstrip().endswith("Bye.")


def test_sigterm_stops_the_chat_cleanly(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    process = subprocess.Popen(
        [sys.executable, "-m", "bot", "--data-dir", str(tmp_path / "data"), "serve", "--channel", "ops"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
    )
    try:
        assert process.stdout is not None and process.stderr is not None
        deadline = time.monotonic() + 120
        for line in process.stdout:  # the stdin pipe stays open: the chat waits for input
            if line.startswith("Welcome to #ops") or time.monotonic() > deadline:
                break
        process.send_signal(signal.SIGTERM)
        # Read through the same buffered file (communicate() would bypass what the loop above buffered).
        out = process.stdout.read()
        assert process.wait(timeout=60) == 0
        err = process.stderr.read()
        assert out.rstrip().endswith("Bye.") and "Traceback" not in err, (out, err)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
