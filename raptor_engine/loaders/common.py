"""What every format's loader shares: limits, the result type, checks and text helpers.

Contract: nothing here knows any one format. It holds the default limits, the
:class:`LoadedText` a loader returns, the :class:`Request` and :class:`Budget` a
loader is given, the refusals every format can raise (too large, too slow),
title helpers, the one text normalisation applied to every format, and the
decoding of bytes that should be text (refused as BINARY when they are not).
Every refusal is a :class:`~raptor_engine.errors.DocumentRejected`.
"""

from __future__ import annotations

import codecs
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath

from raptor_engine import defaults
from raptor_engine.errors import DocumentRejected, RejectReason

# Every module of the package logs under the package's name, as the single
# module it was split from did: operators' log lines read the same.
logger = logging.getLogger("raptor_engine.loaders")

DEFAULT_MAX_BYTES = defaults.MAX_FILE_BYTES
DEFAULT_MAX_TEXT_CHARS = defaults.MAX_TEXT_CHARS  # see raptor_engine.defaults for why

# Any one extraction stops past this; checked between pages and parser chunks,
# and between the operations of a PDF page. Read when a budget starts (not
# copied at import), so a test can shorten it.
TIME_BUDGET_S = 120.0

# Text is refused as binary when more than this share of its characters are
# control characters: real text has almost none, random bytes have ~10-20 %.
_MAX_CONTROL_SHARE = 0.05
# Control characters other than tab/newline/carriage return/form feed/vertical
# tab, including DEL and the C1 range that latin-1 maps bytes 0x80-0x9F to.
_CONTROL_RE = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
# Whitespace (other than newlines) ending a line. The look-behind makes a match
# start only at the beginning of a run, which keeps the search linear.
_TRAILING_SPACE_RE = re.compile(r"(?<![^\S\n])[^\S\n]++(?=\n|\Z)")


@dataclass(frozen=True, slots=True)
class LoadedText:
    """The text extracted from one file.

    ``title`` is the document's own title when it has one (HTML ``<title>``,
    first Markdown ``# `` heading, PDF ``/Title``, docx core title), else the
    file name. ``text`` is normalised and never empty or whitespace-only.
    ``format`` is the name of the format that read it, as given in the suffix
    table (:data:`raptor_engine.loaders.formats.FORMATS`).
    """

    title: str
    text: str
    format: str


@dataclass(slots=True)
class Budget:
    """What one extraction may still spend: characters of text and time."""

    filename: str
    max_text_chars: int
    deadline: float
    chars: int = 0

    @classmethod
    def starting_now(cls, filename: str, max_text_chars: int) -> Budget:
        """A budget whose time runs out :data:`TIME_BUDGET_S` seconds from now."""
        return cls(filename, max_text_chars, time.monotonic() + TIME_BUDGET_S)

    def add_text(self, count: int) -> None:
        """Count ``count`` more characters; refuses the file past the text limit."""
        self.chars += count
        check_text_size(self.chars, self.filename, self.max_text_chars)

    def check_time(self) -> None:
        """Refuses the file once the time budget is spent."""
        if time.monotonic() > self.deadline:
            raise too_slow(self.filename)


@dataclass(frozen=True, slots=True)
class Request:
    """Everything a format's loader is given besides the file's bytes.

    ``accepted`` is the list of accepted types as refusals word it; it is passed
    down, not imported, because it derives from the suffix table, which imports
    the loaders (a loader importing it back would close an import cycle).
    """

    format: str
    max_bytes: int
    accepted: str
    budget: Budget

    @property
    def filename(self) -> str:
        return self.budget.filename


# The one signature every format's loader has; the suffix table holds these.
Loader = Callable[[bytes, Request], LoadedText]


# --------------------------------------------------------------------------
# Refusals any format can raise
# --------------------------------------------------------------------------


def check_size(size: int, filename: str, max_bytes: int) -> None:
    """Refuse a file of ``size`` bytes when it is over ``max_bytes``."""
    if size > max_bytes:
        raise DocumentRejected(
            RejectReason.TOO_LARGE,
            filename,
            f"the file is {human_size(size)}, over the limit of {human_size(max_bytes)}",
        )


def check_text_size(chars: int, filename: str, max_text_chars: int) -> None:
    """Refuse a file once its text passes ``max_text_chars`` characters."""
    if chars > max_text_chars:
        raise DocumentRejected(
            RejectReason.TOO_LARGE,
            filename,
            f"the file holds more than {human_size(max_text_chars)} of text, the limit; "
            "split it into smaller files and send them one by one",
        )


def too_slow(filename: str) -> DocumentRejected:
    """The refusal of a file whose extraction ran past the time budget."""
    return DocumentRejected(
        RejectReason.TOO_LARGE,
        filename,
        f"reading it took longer than {TIME_BUDGET_S:.0f} seconds, so it is too large or too "
        "complex; split it into smaller files or save it again in a simpler form",
    )


def human_size(n: int) -> str:
    """``n`` bytes as MB (one decimal), or KB/bytes when smaller than that."""
    if n >= 1024 * 1024:
        return f"{n / (1024 * 1024):.1f} MB".replace(".0 MB", " MB")
    if n >= 1024:
        return f"{n / 1024:.1f} KB".replace(".0 KB", " KB")
    return f"{n} bytes"


# --------------------------------------------------------------------------
# Titles and text
# --------------------------------------------------------------------------


def default_title(filename: str) -> str:
    """The file name without any directory part, used when a file has no title."""
    return PurePath(filename).name or filename


def clean_title(raw: object) -> str:
    """A metadata title as one trimmed line; empty when there is none."""
    if not isinstance(raw, str):
        return ""
    return " ".join(_CONTROL_RE.sub(" ", raw[:10_000]).split())


def normalise_text(text: str) -> str:
    """Normalise extracted text for every format.

    Newlines become ``'\\n'`` (form feeds and Unicode separators too), stray
    control characters are dropped, trailing whitespace is trimmed from every
    line, runs of blank lines shrink to one, and leading/trailing blank lines
    are removed. Leading indentation is kept (Markdown code, pre blocks).
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = text.translate({0x0B: "\n", 0x0C: "\n", 0x85: "\n", 0x2028: "\n", 0x2029: "\n\n"})
    text = _CONTROL_RE.sub("", text).replace("\ufeff", "")
    # Regular expressions, not a list of lines: a file of millions of short
    # lines would otherwise cost hundreds of MB in line objects.
    text = _TRAILING_SPACE_RE.sub("", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n")


def require_text(text: str, filename: str, detail: str) -> str:
    """Return ``text`` normalised; refuse with NO_TEXT and ``detail`` when blank."""
    text = normalise_text(text)
    if not text.strip():
        raise DocumentRejected(RejectReason.NO_TEXT, filename, detail)
    return text


# --------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------


def decode_text(data: bytes, filename: str, declared: str | None = None) -> str:
    """Decode bytes that should be text; refuse them as BINARY when they are not.

    Order: a UTF-8 BOM, a UTF-16 BOM, then (only when there are no NUL bytes)
    strict UTF-8, the ``declared`` charset if any, and cp1252 / latin-1 — the
    last two only when the result has few control characters, because they
    decode any byte sequence.
    """
    if data.startswith(codecs.BOM_UTF8):
        text = _try_decode(data[len(codecs.BOM_UTF8) :], "utf-8")
    elif data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        text = _try_decode(data, "utf-16")
    elif b"\x00" in data:
        # NUL never occurs in 8-bit text; UTF-16 without a BOM is not supported.
        text = None
    else:
        text = _try_decode(data, "utf-8")
        if text is None and declared:
            text = _try_decode(data, declared)
        if text is None:
            text = _try_decode(data, "cp1252") or data.decode("latin-1")
    if text is None or _looks_binary(text):
        raise DocumentRejected(
            RejectReason.BINARY,
            filename,
            "the file does not contain readable text (it looks like binary data); "
            f"{PurePath(filename).suffix.lower()} files must be plain text",
        )
    return text


def _try_decode(data: bytes, encoding: str) -> str | None:
    """``data`` decoded strictly with ``encoding``, or None when it does not fit."""
    try:
        return data.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return None


def _looks_binary(text: str) -> bool:
    """True when ``text`` contains NUL or a high share of control characters."""
    if "\x00" in text:
        return True
    # subn counts without building a list of millions of one-character matches.
    controls = _CONTROL_RE.subn("", text)[1]
    return controls > _MAX_CONTROL_SHARE * max(len(text), 1)
