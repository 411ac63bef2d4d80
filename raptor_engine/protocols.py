"""The one-method protocols the engine depends on, so providers can be swapped.

An offline default implements each (sentence-transformers, extractive
summaries and answers); a language-model endpoint can implement them too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

import numpy as np

from raptor_engine.types import Answer, ChannelKey, Hit


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens the way the embedding model sees them."""

    def count(self, text: str) -> int:
        """Tokens in ``text``, without special tokens."""
        ...

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each of ``texts``; one batched call."""
        ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors.

    ``model_id`` names the model (stored with every tree, so that a channel is
    never queried with another model than the one it was built with).
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised float32 row per text, in order. Batches internally.

        Raises ``ProviderError`` when the model fails.
        """
        ...


@runtime_checkable
class Summarizer(Protocol):
    """Writes the text of a summary node from its members' texts.

    ``identity`` names the model and prompt; a summary is cached under a hash of
    its members' texts and this identity. Calls may run concurrently.
    """

    @property
    def identity(self) -> str: ...

    async def summarize(self, texts: Sequence[str]) -> str:
        """A summary of ``texts`` (never empty). Raises ``ProviderError`` on failure."""
        ...


@runtime_checkable
class LeafSummarizer(Summarizer, Protocol):
    """A summariser that may be given the leaves under a cluster instead of its members.

    When ``reads_leaves`` is true, every summary is made from the texts of all
    the leaves beneath its cluster (the chunks of the documents, in tree
    order), not from the summaries below it. An extractive summariser loses
    what its lower summaries left out when it summarises them again; reading
    the leaves, its top summary of a document chooses among all of the
    document's sentences. A language model keeps the paper's way (members'
    texts) and need not implement this. Called only when ``reads_leaves`` is true.
    """

    @property
    def reads_leaves(self) -> bool: ...

    async def summarize_whole(self, texts: Sequence[str]) -> str:
        """The summary at the top of a source or of the channel (a root) from all its leaves'
        ``texts``: the one a question about the whole material opens with, so it may be longer
        than the others. Never empty; raises ``ProviderError`` on failure."""
        ...


@runtime_checkable
class MeteredSummarizer(Summarizer, Protocol):
    """A summariser whose calls spend a language model's requests and tokens.

    Builds check a spending ceiling before asking it for a batch of summaries;
    summarisers that spend nothing metered (the extractive one) need not
    implement this.
    """

    def cost(self, texts: Sequence[str]) -> int:
        """Tokens one summary of ``texts`` spends at most: its prompt plus the completion budget."""
        ...


@runtime_checkable
class Answerer(Protocol):
    """Answers a question from retrieved nodes, citing them."""

    @property
    def identity(self) -> str: ...

    async def answer(self, question: str, hits: Sequence[Hit]) -> Answer:
        """An answer citing ``hits`` by number (1-based, in the order given).

        When ``hits`` hold nothing relevant, ``Answer.found`` is False and the
        text says so. Raises ``ProviderError`` on failure.
        """
        ...


class AnswerStream(Protocol):
    """An answer as it is being written.

    Iterating gives the answer's text in pieces, in order, already final: joined, they are
    exactly ``answer.text`` (citation markers renumbered as in the finished answer). Once the
    iteration ended, :attr:`answer` is the whole :class:`Answer`, the same a non-streamed
    ``Answerer.answer`` gives for the same reply. A failure raises ``ProviderError`` from the
    iteration; after some text was given it says the answer broke off (it is never restarted
    behind the reader's back). Iterated once.
    """

    def __aiter__(self) -> AsyncIterator[str]: ...

    @property
    def answer(self) -> Answer:
        """The whole answer; raises ``RuntimeError`` before the iteration ended."""
        ...


@runtime_checkable
class StreamingAnswerer(Answerer, Protocol):
    """An answerer that can give its answer as it is written (a language model). The offline
    answerer computes its answer at once and does not implement this."""

    def answer_stream(self, question: str, hits: Sequence[Hit]) -> AnswerStream:
        """The answer to ``question`` from ``hits`` as an :class:`AnswerStream`; nothing is
        asked of the model until it is iterated."""
        ...


@runtime_checkable
class BuildGuard(Protocol):
    """Keeps two processes from rebuilding one channel at once (where they can see each other)."""

    def hold(self, key: ChannelKey) -> AbstractContextManager[object]:
        """Held while a rebuild of ``key`` runs. Entering raises ``BuildBusy`` at once,
        without waiting, if another builder holds it."""
        ...

    def confirm(self, key: ChannelKey) -> None:
        """Called right before a build held under :meth:`hold` serves its tree: raises
        ``BuildSuperseded`` if the hold was lost meanwhile (a lease that ran out while its
        holder was paused), so a builder that was cut off never switches the served tree
        afterwards (fencing). Guards whose hold cannot be lost do nothing."""
        ...


@runtime_checkable
class SupportJudge(Protocol):
    """Decides whether cited passages support an answer's statements, in place of the
    lexical measure of ``answer_check.py``."""

    @property
    def identity(self) -> str: ...

    def supported(self, claims: Sequence[tuple[str, Sequence[str]]]) -> list[bool]:
        """For each ``(statement, passages)``, whether the passages support the statement, in
        order. Blocking (the answer check runs in a worker thread). Raises ``JudgeFailed``
        when it cannot decide (the caller then falls back to the lexical measure)."""
        ...
