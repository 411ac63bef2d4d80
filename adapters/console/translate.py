"""Pure translation for the console: a typed line to a neutral event, a reply to printable text.

A plain line is a question. A line starting with ``/`` is a command:
``/upload PATH`` (reads the file into an :class:`Upload`), ``/pin TEXT`` (a
:class:`Pin` under a generated id such as ``console-pin-3``), ``/unpin ID``,
``/quit``; every other ``/name argument`` is a :class:`Command` for the
handler (``/ask``, ``/rebuild``, ``/status``, ``/sources``, ``/forget``,
``/node``, ``/tree``, ``/help``; unknown names get help).

A reply is printed as text (:func:`render_reply`) with no control character but the
line end and the tab (:func:`printable`): a terminal has no mention, and a masked
Markdown link shows its address as written, but an escape sequence in a document or a
model's answer could make a hidden link (OSC 8), move the cursor or rewrite what was
printed.

The only input/output here is reading the file named by ``/upload``; the
caller runs :func:`parse_line` in a worker thread for that reason.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from adapters.markdown_text import align_tables
from bot import replies
from bot.commands import HELP, parse_command
from bot.neutral import (
    ChannelKey,
    Command,
    Event,
    Person,
    Pin,
    Question,
    Reply,
    ReplyKind,
    Unpin,
    Upload,
)
from bot.replies import FILE_TYPES

log = logging.getLogger(__name__)

PLATFORM = "console"
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
PIN_PREFIX = "console-pin-"
QUIT_WORDS = ("quit", "exit")

CONSOLE_HELP = f"""\
In this terminal, also:
  /upload PATH   add a file ({FILE_TYPES}) as a source
  /pin TEXT      add a short note as a source, as if a message were pinned
  /unpin ID      remove a pinned note (its console-pin id) or a source (its id)
  /good          👍 the last answer
  /bad           👎 the last answer: asks what was wrong and, optionally, the right answer
  /quit          leave (Ctrl-D works too)
Anything else you type is a question."""


@dataclass(frozen=True, slots=True)
class Quit:
    """The person asked to leave."""


@dataclass(frozen=True, slots=True)
class Rate:
    """The person rates the last answer: 👍 (``up``) or 👎 (which opens the feedback prompt)."""

    up: bool


@dataclass(frozen=True, slots=True)
class Notice:
    """Something to print at once, with nothing sent to the bot (e.g. an unreadable path)."""

    text: str


@dataclass(frozen=True, slots=True)
class LineContext:
    """Who types, in which channel; the next pin's number; the upload size limit
    (a file is read up to one byte past it; the upload carries the file's true size,
    so the engine refuses it as too large and says how large it is)."""

    channel: ChannelKey
    person: Person
    pin_number: int
    max_upload_bytes: int


def parse_line(line: str, context: LineContext) -> Event | Quit | Notice | Rate | None:
    """The event a typed line stands for; None for a blank line. See the module docstring."""
    text = line.strip()
    if not text:
        return None
    if not text.startswith("/"):
        if text.lower() == HELP:  # a lone "help" is not a question anyone means to ask
            return Command(context.channel, context.person, HELP)
        return Question(context.channel, context.person, text)
    name, argument = parse_command(text)
    if name in QUIT_WORDS:
        return Quit()
    if name in ("good", "bad"):
        return Rate(up=name == "good")
    if name == "upload":
        return read_upload(argument, context) if argument else Notice("Usage: /upload PATH")
    if name == "pin":
        return pin_event(argument, context) if argument else Notice("Usage: /pin TEXT")
    if name == "unpin":
        return Unpin(context.channel, context.person, argument) if argument else Notice("Usage: /unpin ID")
    return Command(context.channel, context.person, name, argument)


def read_upload(path_text: str, context: LineContext) -> Upload | Notice:
    """The file at ``path_text`` (``~`` expanded, surrounding quotes dropped) as an Upload
    linked by its ``file://`` URI, with its true size; a Notice saying why when it cannot
    be read. Only a regular file is opened: a named pipe or a device would block the read
    forever, so it is refused from ``stat()``, and the file is opened without blocking
    and checked again in case it was swapped in between."""
    path = Path(path_text.strip().strip("'\"")).expanduser()
    try:
        if (notice := _not_a_file(path, path.stat().st_mode)) is not None:
            return notice
        with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as handle:
            status = os.fstat(handle.fileno())
            if (notice := _not_a_file(path, status.st_mode)) is not None:
                return notice
            data = handle.read(context.max_upload_bytes + 1)
    except FileNotFoundError:
        return Notice(f"! There is no file {path}.")
    except PermissionError:
        return Notice(f"! Permission to read {path} was denied.")
    except OSError as exc:
        return Notice(f"! Cannot read {path}: {exc.strerror or exc}.")
    return Upload(context.channel, context.person, path.name, data, link=path.resolve().as_uri(), size=status.st_size)


def _not_a_file(path: Path, mode: int) -> Notice | None:
    """A Notice when ``mode`` is not a regular file's; None when it is."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return Notice(f"! {path} is a folder; give the path of a file.")
    kind = "a named pipe" if stat.S_ISFIFO(mode) else "a device or socket"
    return Notice(f"! {path} is {kind}, not a regular file; give the path of a saved file.")


def pin_event(text: str, context: LineContext) -> Pin:
    """A note pinned from the console, under the id ``console-pin-<n>``."""
    external_id = f"{PIN_PREFIX}{context.pin_number}"
    return Pin(context.channel, context.person, text, external_id, author=context.person.label)


def pin_number_of(external_id: str) -> int:
    """The ``n`` of ``console-pin-<n>``; 0 for any other id."""
    suffix = external_id.removeprefix(PIN_PREFIX)
    return int(suffix) if external_id.startswith(PIN_PREFIX) and suffix.isdigit() else 0


def pinned_notice(pin: Pin) -> str:
    return f"(pinned as {pin.external_id}; /unpin {pin.external_id} removes it)"


def render_reply(reply: Reply) -> str:
    """A reply as terminal text, :func:`printable`: an answer with its numbered sources,
    progress lines prefixed with ``… ``, errors with ``! `` and their reference. An
    answer's Markdown is printed as written (a terminal shows it as plain text, readable
    as it is), except its tables, laid out in aligned columns."""
    return printable(_reply_text(reply))


def _reply_text(reply: Reply) -> str:
    if reply.kind is ReplyKind.ANSWER:
        return replies.cited_text(align_tables(reply.text), reply.warning, reply.citations)
    if reply.kind is ReplyKind.PROGRESS:
        return "\n".join(f"… {line}" for line in reply.text.splitlines() or [""])
    if reply.kind is ReplyKind.ERROR:
        text = reply.text
        if reply.reference and reply.reference not in text:
            text += f" (reference {reply.reference})"
        return f"! {text}"
    return reply.text


def printable(text: str) -> str:
    """``text`` without control characters (C0 but the line end and the tab, DEL, C1): no
    escape sequence from a document or a model reaches the terminal. Character by
    character, so the text printed of an answer as it grows is the same either way."""
    return _CONTROLS.sub("", text)


def picture_notice(path: Path) -> str:
    return f"Tree picture saved to {path}"
