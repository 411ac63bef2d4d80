"""Embeddings through ``/v1/embeddings``.

Contract: :class:`OpenAIEmbedder` is an :class:`~raptor_engine.protocols.Embedder`:
one L2-normalised float32 row per text, in order, every row of one
``dimension`` (given, or found by embedding a probe text on first use; a
model answering with another raises ``ProviderError``). Requests go through
the :class:`~raptor_engine.llm.client.LLMClient`, with its bound on requests
in flight and its retry policy; ``embed`` blocks the calling thread on the
client's event loop, ``aembed`` is its async form.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np

from raptor_engine.errors import ProviderError
from raptor_engine.llm.client import LLMClient

PROBE_TEXT = "dimension probe"


class OpenAIEmbedder:
    """An :class:`~raptor_engine.protocols.Embedder` over ``/v1/embeddings``.

    Batches of ``batch_size`` texts go out concurrently (within the client's
    bound) with the client's retry policy; rows come back L2-normalised
    float32. ``dimension`` is found by embedding a probe text on first use if
    not given. ``embed`` is synchronous, as the protocol wants: it blocks the
    calling thread on the client's event loop (see :mod:`raptor_engine.llm.event_loop`), so
    it works from worker threads and, blocking it, from an event loop too;
    async code may prefer :meth:`aembed`.
    """

    def __init__(self, client: LLMClient, model: str, dimension: int | None = None, batch_size: int = 64) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._client = client
        self._model = model
        self._dimension = dimension
        self._batch_size = batch_size
        self._probe_lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return f"api:{self._model}"

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            with self._probe_lock:
                if self._dimension is None:
                    self.embed([PROBE_TEXT])
        assert self._dimension is not None
        return self._dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """See the ``Embedder`` protocol. Raises ``ProviderError`` when the endpoint fails."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return self._client.run_sync(self.aembed(texts))

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        """``embed`` for async callers."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        batches = [list(texts[i : i + self._batch_size]) for i in range(0, len(texts), self._batch_size)]
        parts = await asyncio.gather(*(self._client.embed(batch, self._model) for batch in batches))
        matrix = np.asarray([row for part in parts for row in part], dtype=np.float32)
        self._check_dimension(matrix.shape[1])
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.maximum(norms, np.float32(1e-12))  # a zero row stays zero rather than NaN

    def _check_dimension(self, found: int) -> None:
        if self._dimension is None:
            self._dimension = found
        elif found != self._dimension:
            raise ProviderError(
                f"the embedding model {self._model!r} at {self._client.endpoint} returned vectors of "
                f"dimension {found}, expected {self._dimension}"
            )
