"""The channel's notes: small named strings kept with its tree (e.g. a pending rebuild request).

Contract: the notes are one JSON object in the ``notes`` record of ``rc-<digest>-meta`` (beside
the ``state`` record naming the served tree, see ``tree_state.py``). One field, not one key
per note: Chroma's upsert merges metadata keys, so a removed key would linger.
"""

from __future__ import annotations

import json

from raptor_engine.store.common import PLACEHOLDER_VECTOR, ChannelCollections, translated


class Notes:
    """Reads and writes of the channel's notes record. Methods raise ``StoreError``."""

    def __init__(self, collections: ChannelCollections) -> None:
        self._at = collections

    def read(self) -> dict[str, str]:
        """Every note, by name."""
        with translated("reading the channel's notes"):
            got = self._at.open("meta").get(ids=["notes"], include=["metadatas"])
        stored = (got["metadatas"][0] or {}) if got["metadatas"] else {}
        notes = json.loads(str(stored.get("notes", "{}")))
        return {str(k): str(v) for k, v in notes.items()}

    def set(self, name: str, value: str | None) -> None:
        """Sets the note ``name`` to ``value``; None removes it. Read, change, write: callers
        changing the same channel's notes from several processes must coordinate."""
        notes = self.read()
        if value is None and name not in notes:
            return  # nothing to write: a dropped channel's notes stay dropped
        if value is None:
            notes.pop(name, None)
        else:
            notes[name] = value
        # One JSON field: Chroma's upsert merges metadata keys, so a removed key would linger.
        metadata = {"notes": json.dumps(notes, sort_keys=True)}
        with translated("writing the channel's notes"):
            self._at.open("meta").upsert(ids=["notes"], metadatas=[metadata], embeddings=[PLACEHOLDER_VECTOR])
