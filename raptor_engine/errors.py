"""The errors raised by ``raptor_engine``, as one tree.

Every error this package raises on purpose derives from :class:`RaptorError`;
errors of the libraries underneath (Chroma, pypdf, sentence-transformers, ...)
are translated where they enter, so a caller needs to catch only this tree::

    RaptorError
    ├── DocumentRejected      a file could not become a source (says which and why)
    ├── ChannelError          the request does not fit the channel's state
    │   ├── NothingToBuild    the channel has no sources
    │   ├── NoMaterial        a question was asked of a channel with no sources
    │   └── NodeNotFound      no node with that id in the channel's tree
    ├── BuildError            a rebuild stopped; the previous tree still serves
    │   └── SpendingLimitReached  ... before passing its ceiling of model calls or tokens
    ├── ProviderError         an embedder, summariser or answerer failed
    │   ├── ModelRequestRejected  a model endpoint refused the request (4xx: key, model, input)
    │   ├── ModelBadResponse      a model endpoint answered with junk (bad JSON, no text)
    │   └── ModelUnavailable      a model endpoint kept failing (429, 5xx, no connection)
    │       └── ModelTimeout      ... or did not answer within the timeout
    └── StoreError            the Chroma store failed
        └── StoreUnavailable  the Chroma store cannot be reached at all
            └── StoreTimeout  ... or did not answer within its deadline

Messages are written for the person who caused them: one sentence, no
traceback needed to understand it.
"""

from __future__ import annotations

from enum import Enum


class RaptorError(Exception):
    """Base of every error raised on purpose by ``raptor_engine``."""


class RejectReason(str, Enum):
    """Why a file could not become a source."""

    UNSUPPORTED_TYPE = "unsupported file type"
    EMPTY = "empty file"
    BINARY = "binary content"
    CORRUPT = "corrupt file"
    ENCRYPTED = "encrypted file"
    TOO_LARGE = "file too large"
    NO_TEXT = "no text found"
    UNREADABLE = "cannot read the file"


class DocumentRejected(RaptorError):
    """A file was refused as a source; nothing was stored.

    ``reason`` is the machine-readable cause, ``filename`` the file's name and
    ``detail`` a human explanation (what was expected, what was found).
    """

    def __init__(self, reason: RejectReason, filename: str, detail: str) -> None:
        self.reason = reason
        self.filename = filename
        self.detail = detail
        super().__init__(f"{filename}: {reason.value}: {detail}")


class ChannelError(RaptorError):
    """The request does not fit the channel's current state."""


class NothingToBuild(ChannelError):
    """A rebuild was asked of a channel that has no sources."""


class NoMaterial(ChannelError):
    """A question was asked of a channel that holds no sources (none was ever added, or all
    were forgotten): nothing was searched, which is not the same as "searched, nothing found"."""


class NodeNotFound(ChannelError):
    """No node with the given id exists in the channel's served tree."""


class BuildError(RaptorError):
    """A rebuild stopped before switching over; the previous tree still serves."""


class BuildBusy(BuildError):
    """Another process is rebuilding the channel now; this rebuild did not start.
    ``holder`` describes it ("process 1234 (python -m bot rebuild ...)")."""

    def __init__(self, holder: str) -> None:
        self.holder = holder
        super().__init__(f"{holder} is rebuilding this channel right now; its tree is served when it "
                         "ends (ask for another rebuild after that if sources changed since)")


class BuildSuperseded(BuildError):
    """The build lost its claim on the channel before serving its tree (its lease ran out
    while it was paused or cut off): another build took over, so this one's tree was
    dropped and the served tree is whatever that build serves."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"this rebuild was taken over by another one ({detail}); its tree was not served")


class BuildHeldBack(BuildError):
    """The rebuilt tree failed the channel's regression gate (``regression_gate.py``): it was
    written and kept aside, not served; the previous tree still answers. ``reason`` says what
    it lost; ``found`` and ``total`` are its approved questions finding their sources;
    ``repeated`` is True when the same sources were held back for the same reason by the build
    before (the channel was told then)."""

    def __init__(self, reason: str, *, found: int, total: int, repeated: bool) -> None:
        self.reason = reason
        self.found = found
        self.total = total
        self.repeated = repeated
        super().__init__(f"the rebuilt tree was held back and the previous one still answers: {reason}")


class SpendingLimitReached(BuildError):
    """A rebuild would pass its ceiling of language-model calls or tokens; it stopped
    before making the requests that would pass it.

    ``kind`` is ``"calls"`` or ``"tokens"``, ``limit`` the ceiling and ``used``
    what was already made or under way when the next batch was refused.
    """

    def __init__(self, message: str, *, kind: str, limit: int, used: int) -> None:
        self.kind = kind
        self.limit = limit
        self.used = used
        super().__init__(message)


class ProviderError(RaptorError):
    """An embedder, summariser or answerer failed to produce its output."""


class JudgeFailed(RaptorError):
    """A support judge (a model or an NLI model asked whether passages support a statement)
    could not decide; the lexical measure decides instead."""


class StoreError(RaptorError):
    """The Chroma store failed while reading or writing."""


class StoreUnavailable(StoreError):
    """The Chroma store cannot be reached (server down, path unusable)."""


class StoreTimeout(StoreUnavailable):
    """A Chroma server did not answer a request within its deadline (paused, overloaded, or
    its packets silently dropped): the call was given up, the server may still carry it out."""


class ModelRequestRejected(ProviderError):
    """A language-model endpoint refused the request (a 4xx other than 429); not retried.

    ``endpoint``, ``model`` and ``status`` say which server refused what; the
    API key is never part of the message.
    """

    def __init__(self, message: str, *, endpoint: str, model: str, status: int | None) -> None:
        self.endpoint = endpoint
        self.model = model
        self.status = status
        super().__init__(message)


class ModelBadResponse(ProviderError):
    """A language-model endpoint answered, but not with usable output (bad JSON, no text)."""

    def __init__(self, message: str, *, endpoint: str, model: str, attempts: int) -> None:
        self.endpoint = endpoint
        self.model = model
        self.attempts = attempts
        super().__init__(message)


class ModelUnavailable(ProviderError):
    """A language-model endpoint kept failing (429, 5xx, connection errors) until retries ran out.

    ``status`` is the last HTTP status, None when no response came at all.
    """

    def __init__(self, message: str, *, endpoint: str, model: str, status: int | None, attempts: int) -> None:
        self.endpoint = endpoint
        self.model = model
        self.status = status
        self.attempts = attempts
        super().__init__(message)


class ModelTimeout(ModelUnavailable):
    """A language-model endpoint did not answer within the timeout, on every attempt."""
