"""Answers kept with their questions, and the votes and feedback people give them.

Contract of :class:`KeptAnswers` (the engine is its one caller; ``Engine.keep_answer``,
``vote``, ``add_feedback`` and ``answers`` state the public side): an answer is kept with the
sources it cites, and the channel keeps only its newest (pruned after each). An answer computed
from a source forgotten meanwhile goes with it (``ChannelWriters.purge_forgotten``). A vote or a
reason reads the kept answer, changes it and writes it back under one lock, so two people
pressing at once both count; one on an answer no longer kept raises ``ChannelError``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

from raptor_engine.channel_writers import ChannelWriters, utc_now
from raptor_engine.errors import ChannelError
from raptor_engine.types import Answer, AnswerRecord, ChannelKey


class KeptAnswers:
    """The channels' kept answers. See the module docstring."""

    def __init__(self, writers: ChannelWriters) -> None:
        self._writers = writers
        # Votes and feedback read a kept answer, change it and write it back: two people
        # pressing at once must not lose one of their writes.
        self._updates = threading.Lock()

    def keep(self, key: ChannelKey, answer_id: str, question: str, answer: Answer, asked_by: str, keep: int,
             thread: str) -> None:
        """Keeps ``answer`` as ``answer_id`` with its question and cited sources; the channel's
        newest ``keep`` answers stay."""
        sources: list[str] = []
        hits = {hit.node.id: hit.node for hit in answer.hits}
        for citation in answer.citations:
            node = hits.get(citation.node_id)
            for source_id in node.source_ids if node else ():
                if source_id not in sources:
                    sources.append(source_id)
        record = AnswerRecord(answer_id, question, answer.text, asked_by, utc_now(), tuple(sources), found=answer.found,
                              thread=thread)
        channel = self._writers.channel(key)
        channel.put_answer(record)
        channel.prune_answers(keep)
        # An answer computed from a source forgotten meanwhile goes with it.
        self._writers.purge_forgotten(key, channel, record.source_ids)

    def vote(self, key: ChannelKey, answer_id: str, voter: str, up: bool) -> AnswerRecord:
        """``voter``'s vote stored on a kept answer (replacing an earlier one); the answer as it is now."""
        return self._update(key, answer_id, "vote", lambda r: replace(r, votes=r.votes | {voter: 1 if up else -1}))

    def add_feedback(self, key: ChannelKey, answer_id: str, voter: str, reason: str) -> AnswerRecord:
        """``voter``'s reason stored on a kept answer, with their 👎 (replacing earlier ones)."""
        return self._update(key, answer_id, "feedback", lambda r: replace(
            r, votes=r.votes | {voter: -1}, reasons=r.reasons | {voter: reason.strip()}))

    def listed(self, key: ChannelKey) -> list[AnswerRecord]:
        """The answers kept in the channel, with their votes, oldest first."""
        return self._writers.channel(key).list_answers()

    def _update(self, key: ChannelKey, answer_id: str, what: str,
                change: Callable[[AnswerRecord], AnswerRecord]) -> AnswerRecord:
        """Reads a kept answer, changes it and writes it back, under the lock; raises
        ``ChannelError`` naming ``what`` was not stored when the answer is no longer kept."""
        channel = self._writers.channel(key)
        with self._updates:
            record = channel.get_answer(answer_id)
            if record is None:
                raise ChannelError(f"that answer is no longer kept in this channel, so the {what} was not stored")
            updated = change(record)
            channel.put_answer(updated)
        return updated
