"""The vector cache: texts embedded once, rows as the embedder gives them, bounded, thread-safe."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from raptor_engine.errors import ProviderError
from raptor_engine.protocols import Embedder
from raptor_engine.vector_cache import VectorCache
from tests.conftest import RecordingEmbedder

SENTENCES = ["The lamp is lit at dusk.", "The stair has 132 steps.", "Diesel comes on Mondays."]


def test_rows_are_the_embedders_in_the_order_asked_repeats_included(embedder: Embedder) -> None:
    cache = VectorCache(RecordingEmbedder(embedder), 16)
    asked = [SENTENCES[1], SENTENCES[0], SENTENCES[1]]
    rows = cache.embed(asked)
    direct = embedder.embed([SENTENCES[1], SENTENCES[0]])
    assert rows.shape == (3, embedder.dimension)
    np.testing.assert_allclose(rows, direct[[0, 1, 0]], atol=1e-6)


def test_a_text_asked_again_is_not_embedded_again(embedder: Embedder) -> None:
    counting = RecordingEmbedder(embedder)
    cache = VectorCache(counting, 16)
    first = cache.embed(SENTENCES[:2])
    again = cache.embed([SENTENCES[1], SENTENCES[2], SENTENCES[0]])
    assert counting.asked == [*SENTENCES[:2], SENTENCES[2]]  # each text once, a new one in the second call
    np.testing.assert_array_equal(again[[2, 0]], first)  # kept rows are given back exactly
    assert len(cache) == 3


def test_the_least_recently_used_text_is_dropped_first(embedder: Embedder) -> None:
    counting = RecordingEmbedder(embedder)
    cache = VectorCache(counting, 2)
    cache.embed(SENTENCES[:2])
    cache.embed([SENTENCES[0]])  # the first is used again: the second is now the oldest
    cache.embed([SENTENCES[2]])  # over the size: the second goes
    counting.asked.clear()
    cache.embed(SENTENCES)
    assert counting.asked == [SENTENCES[1]]
    assert len(cache) == 2


def test_nothing_asked_gives_no_rows_and_embeds_nothing(embedder: Embedder) -> None:
    counting = RecordingEmbedder(embedder)
    rows = VectorCache(counting, 4).embed([])
    assert rows.shape == (0, embedder.dimension) and counting.asked == []


def test_a_failing_embedder_raises_and_keeps_nothing(embedder: Embedder) -> None:
    counting = RecordingEmbedder(embedder)
    counting.fail = True
    cache = VectorCache(counting, 4)
    with pytest.raises(ProviderError):
        cache.embed(SENTENCES)
    assert len(cache) == 0
    counting.fail = False
    assert cache.embed(SENTENCES).shape == (3, embedder.dimension)


def test_a_cache_is_an_embedder_of_the_same_model(embedder: Embedder) -> None:
    cache = VectorCache(embedder, 4)
    assert isinstance(cache, Embedder)
    assert (cache.model_id, cache.dimension) == (embedder.model_id, embedder.dimension)


def test_a_cache_holds_at_least_one_text(embedder: Embedder) -> None:
    with pytest.raises(ValueError, match="at least one"):
        VectorCache(embedder, 0)


def test_threads_asking_at_once_get_the_same_rows(embedder: Embedder) -> None:
    cache = VectorCache(RecordingEmbedder(embedder), 8)
    expected = embedder.embed(SENTENCES)
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: cache.embed(SENTENCES), range(16)))
    for rows in results:
        np.testing.assert_allclose(rows, expected, atol=1e-6)
    assert len(cache) == 3
