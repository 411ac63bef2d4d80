"""The console channel: a terminal as one chat channel, the simplest adapter of the protocol.

:class:`ConsoleChannel` turns typed lines into neutral events (see
:mod:`adapters.console.translate`), hands them to the bot's handler, and
writes the replies through an injected ``write``; tree pictures are saved as
PNG files and their path printed. Once started, the channel is the bot's courier for
the console (platform ``"console"``): replies without an event (a rebuild's progress
and result) are printed like any other, those for another console channel under its
name. :class:`ConsoleAdapter` is the adapter ``python -m bot serve`` runs when no chat
platform is configured.

Given a ``write_partial`` (text printed as it is, without a line end), a language model's
answer is printed as it is written (:class:`ConsoleDraft`), then its citations; without
one, answers are printed when finished.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import TextIO

from adapters.console import translate
from bot.commands import HELP
from bot.neutral import Attachment, ChannelKey, Command, Feedback, Person, Pin, Reply, ReplyAddress, Send, Vote
from bot.runtime import Assistant
from bot.samples import SAMPLE_DOCUMENT, SAMPLE_QUESTION

log = logging.getLogger(__name__)

Write = Callable[[str], None]
"""Prints one message (one or more lines) to the person at the terminal."""


class ConsoleChannel:
    """One terminal channel ``console/<workspace>/<channel>`` of a started :class:`Assistant`.

    The person at the terminal manages the channel (it is their terminal), so
    ``rebuild`` and ``forget`` are theirs to run.
    """

    def __init__(self, bot: Assistant, write: Write, channel: str | None = None,
                 write_partial: Write | None = None) -> None:
        """``channel`` overrides ``config.console.channel``; ``write_partial`` prints text as it
        is (no line end added), for answers printed as they are written."""
        console = bot.config.console
        self.bot = bot
        self._write_partial = write_partial
        self.key = ChannelKey(translate.PLATFORM, console.workspace, channel or console.channel)
        self.person = Person(console.user, manages_channel=True)
        self._write = write
        self._next_pin = 1
        self._pictures_dir = console.pictures_dir or bot.config.data_dir / "pictures"
        self._last_answer = ""  # the id of the last answer printed: /good and /bad rate it
        self._prompt: FeedbackPrompt | None = None  # a 👎's questions, while they are being answered

    async def start(self) -> None:
        """Greets the person. A channel without sources gets the bundled sample (when
        ``console.sample`` is on) and a question to try; pin ids continue after the
        highest ``console-pin-<n>`` already stored. From now on the bot may print through
        :meth:`courier`."""
        self.bot.add_courier(translate.PLATFORM, self.courier)
        sources = await self.bot.sources(self.key)
        self._next_pin = 1 + max((translate.pin_number_of(s.external_id) for s in sources), default=0)
        if sources:
            self.bot.keep_scheduled(self.key)  # scheduled rebuilds continue after a restart
            self._write(
                f"Welcome back to #{self.key.channel}: {len(sources)} source(s). "
                "Ask a question, or type /help."
            )
        elif self.bot.config.console.sample:
            await self.handle_line(f"/upload {SAMPLE_DOCUMENT}")
            self._write(
                f"Welcome to #{self.key.channel}. I added a sample handbook so you can try me at once. Ask, for example:\n"
                f"  {SAMPLE_QUESTION}\n"
                "Type /rebuild to build its summaries, /help for everything else."
            )
        else:
            self._write(
                f"Welcome to #{self.key.channel}. It has no material yet: add a file with /upload PATH "
                "or a note with /pin TEXT, then ask. Type /help for the commands."
            )

    async def handle_line(self, line: str) -> bool:
        """Handles one typed line; False once the person asked to quit. While a 👎's prompt
        is open, the line answers its question instead."""
        if self._prompt is not None:
            await self._answer_prompt(line)
            return True
        context = translate.LineContext(self.key, self.person, self._next_pin, self._max_upload_bytes())
        # In a worker thread: /upload reads a file, which may be large or slow.
        event = await asyncio.to_thread(translate.parse_line, line, context)
        if event is None:
            return True
        if isinstance(event, translate.Quit):
            return False
        if isinstance(event, translate.Notice):
            self._write(event.text)
            return True
        if isinstance(event, translate.Rate):
            await self._rate(event.up)
            return True
        if isinstance(event, Pin):
            self._next_pin += 1
        send = ConsoleSend(self, self._write_partial) if self._write_partial is not None else self.send
        await self.bot.handler.handle(event, send)
        if isinstance(event, Pin):
            self._write(translate.pinned_notice(event))
        if isinstance(event, Command) and event.name == HELP and not event.argument:
            self._write(translate.CONSOLE_HELP)
        return True

    async def _rate(self, up: bool) -> None:
        """/good votes 👍 on the last answer; /bad opens the feedback prompt (a 👎's form)."""
        if not self._last_answer:
            self._write("There is no answer to rate yet: ask a question first.")
        elif up:
            await self.bot.handler.handle(Vote(self.key, self.person, self._last_answer, up=True), self.send)
        else:
            self._prompt = FeedbackPrompt(self._last_answer)
            self._write(FeedbackPrompt.ASK_REASON)

    async def _answer_prompt(self, line: str) -> None:
        """One answer to the open 👎 prompt: the reason, then the right answer (blank: none),
        after which the feedback goes to the bot."""
        assert self._prompt is not None
        if self._prompt.reason is None:
            self._prompt.reason = line.strip()
            self._write(FeedbackPrompt.ASK_CORRECTION)
            return
        prompt, self._prompt = self._prompt, None
        feedback = Feedback(self.key, self.person, prompt.answer_id, prompt.reason or "", line.strip())
        await self.bot.handler.handle(feedback, self.send)

    def remember(self, reply: Reply) -> None:
        """Notes the id of an answer printed, for /good and /bad."""
        if reply.answer_id:
            self._last_answer = reply.answer_id

    async def send(self, reply: Reply) -> None:
        """Writes a reply; its attachments (the tree picture) are saved as files first."""
        self.remember(reply)
        for attachment in reply.attachments:
            path = await asyncio.to_thread(self._save, attachment)
            self._write(translate.picture_notice(path))
        self._write(translate.render_reply(reply))

    def courier(self, address: ReplyAddress) -> Send:
        """The ``send`` of replies to ``address`` without an event: printed as :meth:`send`
        prints, after a line naming the channel when it is not this one."""
        if address.channel == self.key:
            return self.send
        heading = f"#{address.channel.channel}:"

        async def send(reply: Reply) -> None:
            self._write(heading)
            await self.send(reply)

        return send

    async def run(self, stdin: TextIO) -> None:
        """Handles lines from ``stdin`` until end of input or ``/quit``.

        Lines are read by a daemon thread, so the event loop keeps running (a
        rebuild's progress is printed while the person types) and a signal can
        end the session while a read is still waiting.
        """
        lines = _read_lines(stdin)
        while (line := await lines.get()) is not None:
            if not await self.handle_line(line):
                return

    def _save(self, attachment: Attachment) -> Path:
        self._pictures_dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        stem = f"{_safe(self.key.channel)}-{stamp}-{Path(attachment.filename).stem}"
        suffix = Path(attachment.filename).suffix or ".png"
        path = self._pictures_dir / f"{stem}{suffix}"
        number = 2
        while path.exists():
            path = self._pictures_dir / f"{stem}-{number}{suffix}"
            number += 1
        path.write_bytes(attachment.data)
        return path.resolve()

    def _max_upload_bytes(self) -> int:
        return self.bot.max_upload_bytes


class FeedbackPrompt:
    """The console's form of a 👎: what was wrong, then (optionally) the right answer."""

    ASK_REASON = "What was wrong with that answer? (one line; Enter to skip)"
    ASK_CORRECTION = "What is the right answer? (one line; Enter to skip)"

    def __init__(self, answer_id: str) -> None:
        self.answer_id = answer_id
        self.reason: str | None = None


class ConsoleSend:
    """The console's ``send`` that can also print an answer as it is written (a
    :class:`~bot.neutral.DraftingSend`)."""

    def __init__(self, channel: ConsoleChannel, write_partial: Write) -> None:
        self._channel = channel
        self._write_partial = write_partial

    async def __call__(self, reply: Reply) -> None:
        await self._channel.send(reply)

    def draft(self, thread: str = "") -> ConsoleDraft:
        return ConsoleDraft(self._channel, self._write_partial)


class ConsoleDraft:
    """An answer printed as it is written: each new piece as it comes (a terminal has no rate
    limit), then, at the end, the rest of the reply as :meth:`ConsoleChannel.send` prints it
    (its citations). A reply that does not continue what was printed (an error: the answer
    broke off) goes on a line of its own after it."""

    interval_s = 0.0

    def __init__(self, channel: ConsoleChannel, write_partial: Write) -> None:
        self._channel = channel
        self._write_partial = write_partial
        self._shown = ""

    async def show(self, text: str) -> None:
        text = translate.printable(text)
        if text.startswith(self._shown):
            self._write_partial(text[len(self._shown):])
            self._shown = text

    async def finish(self, reply: Reply) -> None:
        if not self._shown:
            await self._channel.send(reply)
            return
        self._channel.remember(reply)
        for text in (reply.text, reply.written):  # marked after it was printed: continue what was
            rendered = translate.render_reply(replace(reply, text=text)) if text else ""
            if rendered.startswith(self._shown) and not reply.attachments:
                self._write_partial(rendered[len(self._shown):] + "\n")
                return
        self._write_partial("\n")
        await self._channel.send(reply)


class ConsoleAdapter:
    """The console adapter, the :class:`adapters.protocol.Adapter` the composition root builds when
    no chat platform is configured: one :class:`ConsoleChannel` reading ``stdin`` and writing
    through ``write``."""

    name = "the console"
    ends_on_its_own = True

    def __init__(self, stdin: TextIO, write: Write, channel: str | None = None,
                 write_partial: Write | None = None) -> None:
        """``channel`` overrides ``config.console.channel``; with ``write_partial``, answers are
        printed as they are written (see :class:`ConsoleChannel`)."""
        self._stdin = stdin
        self._write = write
        self._channel = channel
        self._write_partial = write_partial

    async def serve(self, bot: Assistant) -> None:
        """Greets, then handles lines until end of input or ``/quit`` (or cancellation)."""
        console = ConsoleChannel(bot, self._write, self._channel, self._write_partial)
        await console.start()
        await console.run(self._stdin)


def _read_lines(stdin: TextIO) -> asyncio.Queue[str | None]:
    """A queue of the lines of ``stdin``, filled by a daemon thread; None marks the end."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | None] = asyncio.Queue()

    def put(line: str | None) -> bool:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, line)
            return True
        except RuntimeError:  # the loop is closed: the session is over
            return False

    def pump() -> None:
        try:
            for line in iter(stdin.readline, ""):
                if not put(line):
                    return
        except (OSError, ValueError) as exc:  # stdin closed under us
            log.info("stopped reading input: %s", exc)
        put(None)

    threading.Thread(target=pump, name="console-input", daemon=True).start()
    return queue


def _safe(name: str) -> str:
    """A channel name usable in a file name."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "channel"
