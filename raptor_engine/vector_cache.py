"""Embeddings of texts embedded lately, kept so that the same text is not embedded again.

The offline answerer embeds the sentences of a question's best nodes to choose which to
quote; questions in one channel keep reaching the same passages, so most of those sentences
were embedded for an earlier question. Embedding is nearly all of an offline answer's cost.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from raptor_engine.protocols import Embedder


class VectorCache:
    """An :class:`~raptor_engine.protocols.Embedder` giving ``embedder``'s vectors, keeping those
    of the last ``size`` distinct texts asked for (least recently used dropped first).
    Thread-safe: answers are computed on worker threads.

    A text's vector is the one computed when it was first embedded, in whatever batch it came
    in; the same text in another batch can differ from it in the last bits of its floats, as
    it can between any two batches.
    """

    def __init__(self, embedder: Embedder, size: int) -> None:
        """``size`` at least 1 (``ValueError`` otherwise)."""
        if size < 1:
            raise ValueError(f"a vector cache holds at least one text, not {size}")
        self._embedder = embedder
        self._size = size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self._embedder.model_id

    @property
    def dimension(self) -> int:
        return self._embedder.dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One row per text, in order, as :meth:`Embedder.embed` gives them; the texts not kept
        are embedded now, in one call (each distinct text once). Raises what the embedder raises."""
        if not texts:
            return np.zeros((0, self._embedder.dimension), dtype=np.float32)
        with self._lock:
            known = {text: self._vectors[text] for text in texts if text in self._vectors}
            for text in known:
                self._vectors.move_to_end(text)
        missing = [text for text in dict.fromkeys(texts) if text not in known]
        if missing:
            # Rows copied apart: a row kept alone must not keep its whole batch's array alive.
            fresh = [row.copy() for row in self._embedder.embed(missing)]
            known |= dict(zip(missing, fresh, strict=True))
            with self._lock:
                self._vectors.update(zip(missing, fresh, strict=True))
                while len(self._vectors) > self._size:
                    self._vectors.popitem(last=False)
        return np.vstack([known[text] for text in texts])

    def __len__(self) -> int:
        with self._lock:
            return len(self._vectors)
