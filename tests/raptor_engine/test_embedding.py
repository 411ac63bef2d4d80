"""The local embedding model, loaded now or on a thread of its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.errors import ProviderError

TEXTS = ["Deploys are frozen on Fridays.", "The cafeteria closes at three."]


def test_a_model_loaded_in_the_background_embeds_as_one_loaded_now(embedder: SentenceTransformerEmbedder) -> None:
    background = SentenceTransformerEmbedder(background=True)
    assert background.model_id == embedder.model_id  # known before the model is loaded
    assert np.allclose(background.embed(TEXTS), embedder.embed(TEXTS), atol=1e-6)
    assert background.dimension == embedder.dimension == 384
    assert background.embed([]).shape == (0, 384)


def test_a_model_that_cannot_load_fails_now_or_at_first_use(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(ProviderError, match="cannot load embedding model"):
        SentenceTransformerEmbedder(missing)
    later = SentenceTransformerEmbedder(missing, background=True)  # no error yet: it loads on a thread
    for _ in range(2):  # every caller hears it, not only the first
        with pytest.raises(ProviderError, match="cannot load embedding model"):
            later.embed(TEXTS)
