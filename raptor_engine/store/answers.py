"""Kept answers: each answer given, with its question, citations and votes.

Contract: ``rc-<digest>-answers`` holds one record per answer, id the answer's id, its text
under ``TEXT_KEY``, the question, asker, time, votes and reasons (JSON) and whether it was
found and whether it cites material that changed after it was given (``changed``), the thread it
was given in and when it was kept (``kept_ns``) in its metadata, and the ids of the sources it
cites under ``sources`` (left out when none: Chroma refuses empty lists).
Answers quote their sources, so forgetting a source deletes the answers citing it; a source
replaced by a new version passes its answers on to it (:meth:`Answers.pass_on`), but for those
quoting text the new version no longer has, which go. Only the
newest are kept (:meth:`Answers.prune`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from raptor_engine.store.common import PLACEHOLDER_VECTOR, TEXT_KEY, ChannelCollections, translated
from raptor_engine.types import AnswerRecord


class Answers:
    """Reads and writes of the channel's ``answers`` collection. Methods raise ``StoreError``."""

    def __init__(self, collections: ChannelCollections) -> None:
        self._at = collections

    def _answers(self) -> Any:
        return self._at.open("answers")

    def put(self, record: AnswerRecord) -> None:
        """Keeps an answer with its question (replacing one with the same id)."""
        metadata: dict[str, Any] = {
            "question": record.question,
            "asked_by": record.asked_by,
            "answered_at": record.answered_at,
            "votes": json.dumps(record.votes, sort_keys=True),
            "found": record.found,
            "changed": record.changed,
            "thread": record.thread,
            "reasons": json.dumps(record.reasons, sort_keys=True),
            # Orders answers kept within one second (answered_at has seconds) for pruning.
            "kept_ns": time.time_ns(),
            TEXT_KEY: record.text,
        }
        if record.source_ids:
            metadata["sources"] = list(record.source_ids)
        with translated("keeping an answer"):
            self._answers().upsert(ids=[record.answer_id], metadatas=[metadata], embeddings=[PLACEHOLDER_VECTOR])

    def prune(self, keep: int) -> int:
        """Deletes the oldest kept answers beyond the newest ``keep``; returns how many went.
        Counted on every call (cheap), but pruned only once the excess is a tenth of ``keep``
        (at least 10), so that answering does not read every answer each time."""
        with translated("pruning kept answers"):
            answers = self._answers()
            if answers.count() <= keep + max(10, keep // 10):
                return 0
            got = answers.get(include=["metadatas"])
            ages = sorted((str(m["answered_at"]), int(m["kept_ns"]), answer_id) for m, answer_id in zip(got["metadatas"], got["ids"]))
            doomed = [answer_id for _, _, answer_id in ages[: len(ages) - keep]]
            for start, end in self._at.batches(len(doomed)):
                answers.delete(ids=doomed[start:end])
        return len(doomed)

    def get(self, answer_id: str) -> AnswerRecord | None:
        """The kept answer with this id, or None."""
        with translated("reading an answer"):
            got = self._answers().get(ids=[answer_id], include=["metadatas"])
        if not got["ids"]:
            return None
        return _answer_from(got["ids"][0], got["metadatas"][0])

    def listed(self) -> list[AnswerRecord]:
        """Every kept answer, oldest first."""
        with translated("listing answers"):
            got = self._answers().get(include=["metadatas"])
        records = [_answer_from(i, m) for i, m in zip(got["ids"], got["metadatas"])]
        return sorted(records, key=lambda r: (r.answered_at, r.answer_id))

    def pass_on(self, source_id: str, successor: str,
                quoting: Callable[[AnswerRecord], bool] = lambda _: False) -> list[AnswerRecord]:
        """The answers citing ``source_id`` made to cite ``successor`` instead and marked
        ``changed``, except those ``quoting`` says quote what the successor no longer says:
        those are deleted first. Returns every one of them as it was before (``changed`` says
        which were marked already)."""
        with translated("passing answers on to a new version of their source"):
            answers = self._answers()
            got = answers.get(where={"sources": {"$contains": source_id}}, include=["metadatas"])
            records = [_answer_from(i, m) for i, m in zip(got["ids"], got["metadatas"])]
            doomed = [r.answer_id for r in records if quoting(r)]
            for start, end in self._at.batches(len(doomed)):
                answers.delete(ids=doomed[start:end])
            updated = [replace(r, source_ids=_swapped(r.source_ids, source_id, successor), changed=True)
                       for r in records if r.answer_id not in doomed]
            for start, end in self._at.batches(len(updated)):
                answers.update(ids=[r.answer_id for r in updated[start:end]],
                               metadatas=[{"sources": list(r.source_ids), "changed": True} for r in updated[start:end]])
        return records

    def delete_citing(self, source_id: str) -> None:
        """Deletes the answers citing ``source_id`` (it is forgotten)."""
        with translated("deleting a source"):
            self._answers().delete(where={"sources": {"$contains": source_id}})


def _swapped(source_ids: tuple[str, ...], old: str, new: str) -> tuple[str, ...]:
    """``source_ids`` with ``old`` replaced by ``new``, each id once, in order."""
    return tuple(dict.fromkeys(new if i == old else i for i in source_ids))


def _answer_from(answer_id: str, meta: dict[str, Any]) -> AnswerRecord:
    votes = {str(k): int(v) for k, v in json.loads(str(meta["votes"])).items()}
    reasons = {str(k): str(v) for k, v in json.loads(str(meta["reasons"])).items()}
    return AnswerRecord(answer_id, str(meta["question"]), str(meta[TEXT_KEY]), str(meta["asked_by"]),
                        str(meta["answered_at"]), tuple(meta.get("sources") or ()), votes,
                        found=bool(meta["found"]), reasons=reasons, changed=bool(meta["changed"]),
                        thread=str(meta["thread"]))
