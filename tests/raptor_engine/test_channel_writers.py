"""The channels' store handles an engine keeps: a bounded number, least recently used let go,
never one of a channel being written. Against embedded Chroma."""

from __future__ import annotations

from pathlib import Path

import pytest

from raptor_engine.channel_writers import ChannelWriters
from raptor_engine.store import ChromaStore
from raptor_engine.types import ChannelKey

A, B, C = (ChannelKey("test", "workspace", name) for name in ("a", "b", "c"))


@pytest.fixture
def store(tmp_path: Path) -> ChromaStore:
    return ChromaStore.embedded(tmp_path / "chroma")


def test_the_least_recently_used_handle_beyond_the_bound_is_let_go_and_opened_again(store: ChromaStore) -> None:
    writers = ChannelWriters(store, lambda key: None, kept=2)
    a, b = writers.channel(A), writers.channel(B)
    b.set_note("kept", "in the store")
    assert writers.channel(A) is a  # A used last: B is now the least recently used

    c = writers.channel(C)

    assert writers.channel(A) is a and writers.channel(C) is c
    reopened = writers.channel(B)
    assert reopened is not b and reopened.notes() == {"kept": "in the store"}


def test_a_channel_being_written_keeps_its_handle_beyond_the_bound(store: ChromaStore) -> None:
    writers = ChannelWriters(store, lambda key: None, kept=1)
    with writers.writing(A):
        a = writers.channel(A)
        writers.channel(B)
        writers.channel(C)
        assert writers.channel(A) is a
