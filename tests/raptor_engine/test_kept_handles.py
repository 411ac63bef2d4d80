"""The reads every question makes (the served state, the sources) keep their collection handles:
opened once, not once a read, and opened again after the channel was dropped elsewhere."""

from __future__ import annotations

from typing import Any

import pytest

from raptor_engine.engine import Engine
from raptor_engine.store import common
from raptor_engine.types import ChannelKey, Document


def test_a_questions_reads_open_their_collections_once_and_again_after_a_drop(
    engine: Engine, channel: ChannelKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine.ingest(channel, Document("The lamp is wound every four hours by the keeper on watch.", "Lamp"))
    reader = engine.store.channel(channel)
    opened: list[str] = []
    original = common.open_collection

    def counted(client: Any, name: str, configuration: dict[str, Any]) -> Any:
        opened.append(name)
        return original(client, name, configuration)

    monkeypatch.setattr(common, "open_collection", counted)
    for _ in range(3):
        assert [source.title for source in reader.list_sources()] == ["Lamp"]
        assert reader.live_state() is None  # never built
    assert sorted(opened) == sorted(set(opened)) and len(opened) == 2  # state and sources: once each
    assert engine.store.channel(channel).drop() > 0  # another handle of the channel drops it
    assert reader.list_sources() == [] and reader.live_state() is None  # reopened, not failing
