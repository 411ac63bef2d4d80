"""Giving back the disk space embedded Chroma keeps after its collections are deleted.

Single-node Chroma (chromadb 1.5) leaves three things behind when a collection is deleted,
and has no garbage collector to take them later (chroma-core/chroma issue 5259):

- its vector segment's directory (``<path>/<segment-uuid>/``, the HNSW index files): the
  collection's rows leave ``chroma.sqlite3`` but the directory stays, even across restarts;
- its documents in the full-text index (the FTS5 table ``embedding_fulltext_search``):
  SQLite's FTS5 records a deletion as a marker beside the old entries, which go only when
  the index's segments are merged;
- free pages in ``chroma.sqlite3``: Chroma uses ``journal_mode=delete`` without
  ``auto_vacuum``, so the file never shrinks by itself.

Every look at or change of ``chroma.sqlite3`` runs in a child process (:func:`_in_child`),
never in the process holding Chroma's client: Chroma links its own copy of SQLite, and two
copies of SQLite in one process do not see each other's POSIX locks (closing a connection of
one drops the other's locks: sqlite.org/howtocorrupt.html, 2.2.1). A merge of the full-text
index made from the bot's own process corrupted the database in a soak ("database disk image
is malformed"); from a child process, SQLite's locking works as between any two processes.

:func:`reclaim` takes all three back, for an embedded data directory only: a Chroma
server's files are its own (its operator can run ``chroma vacuum`` on them).

Measured with chromadb 1.5.9, while the same process kept its client open and writing:
a collection of 6,000 documents of 11 kB, deleted, left a 300 MB ``chroma.sqlite3``;
``chroma vacuum`` alone made it 67 MB (the full-text index of the deleted documents),
merging that index first made it 0.2 MB. Writes of another collection during the
vacuum waited up to 0.6 s and none failed.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raptor_engine.errors import StoreError

log = logging.getLogger(__name__)

DATABASE = "chroma.sqlite3"
FULL_TEXT_INDEX = "embedding_fulltext_search"  # Chroma's FTS5 table of every document
BUSY_TIMEOUT_S = 10  # waits this long for Chroma's own writes (ours or a vacuum's lock)
VACUUM_TIMEOUT_S = 600  # a whole rewrite of the file: seconds for hundreds of MB
# At open, the file is rewritten only when this much of it is free: a rewrite costs a
# process start and time proportional to the file, and Chroma's ordinary work (its log
# being purged) leaves some free pages that SQLite reuses anyway.
WORTH_COMPACTING_SHARE = 0.25
WORTH_COMPACTING_BYTES = 1 << 20
# A merged trigram index is about three times its text (2.9x measured); past this many times,
# deleted entries are a quarter of it. Merging then keeps SQLite's file from growing to hold
# them (the pages they free are reused), at a fraction of a second per merge.
FULL_TEXT_BLOAT = 4
_INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL
_SEGMENT_DIR = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """What one :func:`reclaim` gave back."""

    orphans: int  # segment directories removed
    orphan_bytes: int  # their size
    database_before: int  # size of chroma.sqlite3 before, in bytes
    database_after: int  # ... and after (the same if it was not compacted)

    @property
    def freed(self) -> int:
        """Bytes given back in all."""
        return self.orphan_bytes + self.database_before - self.database_after


def reclaim(path: Path, always_compact: bool = True) -> Reclaimed:
    """Removes the orphan segment directories of the embedded Chroma data directory ``path``
    and compacts ``chroma.sqlite3``: always, or (``always_compact=False``, the cheap check
    at open) only when at least a quarter of it, and 1 MiB, is free pages.

    Safe while this process's Chroma client keeps using ``path``, from any thread: a
    directory that a row of ``segments`` names is never touched, compacting leaves every
    row as it was, and Chroma's writes meanwhile wait for the locks (0.6 s at most,
    measured while a 300 MB file was compacted). Meant for a data
    directory one process uses (the bot's data-directory lock sees to that). Raises
    ``StoreError`` if a step fails; what was done stays done.
    """
    database = path / DATABASE
    candidates = _segment_dirs(path)  # listed before the table is read: see orphan_segment_dirs
    # One child process for both looks: this runs at every open of the store.
    survey = _in_child("survey", database)
    orphans = _unnamed(candidates, set(survey["segments"]))
    orphan_bytes = sum(_size(directory) for directory in orphans)
    for directory in orphans:
        _remove(directory)
    before = _file_size(database)
    if always_compact or survey["worth"]:
        compact(path)
    after = _file_size(database)
    return Reclaimed(len(orphans), orphan_bytes, before, after)


def orphan_segment_dirs(path: Path) -> list[Path]:
    """The directories under ``path`` named like a UUID that no row of Chroma's ``segments``
    table names: segments of deleted collections.

    The directories are listed first and the table read second: Chroma adds a segment's
    row when it creates the collection and its directory only on the first write, so a
    directory made meanwhile (by a collection created in another thread) is named by
    what is read, and never taken for an orphan.
    """
    candidates = _segment_dirs(path)
    if not candidates:
        return []
    return _unnamed(candidates, live_segments(path))


def _unnamed(candidates: list[Path], live: set[str]) -> list[Path]:
    """The segment directories among ``candidates`` that no live segment names."""
    return sorted(entry for entry in candidates if entry.name not in live)


def _segment_dirs(path: Path) -> list[Path]:
    """The directories under ``path`` named like a segment (a UUID)."""
    try:
        return [entry for entry in path.iterdir() if entry.is_dir() and _SEGMENT_DIR.match(entry.name)]
    except OSError as exc:
        raise StoreError(f"cannot list the Chroma data directory {path}: {exc}") from exc


def compact(path: Path) -> None:
    """Merges Chroma's full-text index, then runs Chroma's own ``chroma vacuum`` on ``path``.

    The merge is FTS5's documented ``optimize`` command: it drops the entries of deleted
    documents and leaves the index's content unchanged; ``chroma vacuum`` does not do it.
    The vacuum is Chroma's command line rather than SQLite's ``VACUUM``: it is Chroma's
    supported means, and it also purges Chroma's write log up to what its vector indexes
    have saved, which only Chroma knows. Measured with the client open in this process:
    both leave it working (queries, writes, a new collection), and a collection with 50
    writes only in its log at the vacuum, killed after it, came back whole (270 of 270).
    It costs a process start (about 1 s) against 0.1 s for SQLite's ``VACUUM``; it runs
    after a channel is dropped, which is rare (a rebuild's leftovers go with :func:`tidy`).
    """
    _in_child("merge", path / DATABASE)
    command = [chroma_command(), "vacuum", "--path", str(path), "--force", "--timeout", str(BUSY_TIMEOUT_S)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=VACUUM_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StoreError(f"chroma vacuum of {path} failed: {exc}") from exc
    if done.returncode != 0:
        last = (done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}").splitlines()[-1]
        raise StoreError(f"chroma vacuum of {path} failed: {last}")


def tidy(path: Path) -> dict[str, float]:
    """Gives back what a rebuild left in the embedded data directory ``path``'s database, in
    one child process (about 0.1 s with nothing to do; see :func:`_in_child`), and returns
    what it found and did (``index``/``text``: bytes of the full-text index and its text
    before; ``merged``: 1 if it merged; ``before``/``after``: the file's bytes).

    - Chroma's full-text index is merged (FTS5 ``optimize``) once deleted entries are a
      quarter of it (see ``FULL_TEXT_BLOAT``). The store keeps texts in metadata, so the
      index holds only what older stores wrote as documents; but those stores wrote trees
      over older ones, and FTS5 kept each overwritten document as a deletion marker until its
      segments merged: in a 15-minute soak (480 rebuilds) the index grew to 13.9 MB for
      1.2 MB of text (merged: 3.4 MB).
    - The file's free pages (those of merges, of Chroma's write log as it is purged, of
      records written over) are given back with SQLite's ``incremental_vacuum``, which moves
      no live data and takes milliseconds. It needs ``auto_vacuum=INCREMENTAL``, which Chroma
      does not set: the first tidy of a database switches it, which rewrites the file once
      (a ``VACUUM``; SQLite keeps the mode from then on, through ``chroma vacuum`` too).
      Compactions (``chroma vacuum``) of the whole file at 25 % free instead left the soak's
      data directory swinging between 1.0x and 1.9x of its size after the first cycle.

    Safe while this process's Chroma client is open, as :func:`reclaim` is: Chroma's
    statements wait for the child's locks (``BUSY_TIMEOUT_S``). Raises ``StoreError``."""
    done: dict[str, float] = _in_child("tidy", path / DATABASE)
    if done["merged"] or done["after"] < done["before"]:
        log.info("tidied Chroma's database: %.1f -> %.1f MB%s", done["before"] / 1e6, done["after"] / 1e6,
                 f" (full-text index merged: {done['index'] / 1e6:.1f} MB for {done['text'] / 1e6:.1f} MB of text)"
                 if done["merged"] else "")
    return done


def _tidy(database: Path) -> dict[str, float]:
    """:func:`tidy`, in the child process."""
    index, text = _measure(database)
    merged = index >= FULL_TEXT_BLOAT * text + WORTH_COMPACTING_BYTES
    before = _file_size(database)
    if merged:
        _merge_full_text_index(database)
    with _connected(database, read_only=False) as connection:
        if int(connection.execute("PRAGMA auto_vacuum").fetchone()[0]) != _INCREMENTAL:
            connection.execute(f"PRAGMA auto_vacuum = {_INCREMENTAL}")
            connection.execute("VACUUM")
        # executescript steps the pragma to its end; execute() would free one page only.
        connection.executescript("PRAGMA incremental_vacuum;")
    return {"index": index, "text": text, "merged": float(merged), "before": before, "after": _file_size(database)}


def live_segments(path: Path) -> set[str]:
    """The ids of every segment the database of the embedded data directory ``path`` names."""
    return set(_in_child("segments", path / DATABASE))


def free_bytes(path: Path) -> int:
    """Bytes of free pages in the embedded data directory ``path``'s database."""
    return int(_in_child("free", path / DATABASE))


def full_text_bytes(path: Path) -> tuple[float, float]:
    """(index, text): bytes of Chroma's full-text index in the embedded data directory
    ``path``, and of the documents it indexes; (0, 0) where there is none."""
    index, text = _in_child("measure", path / DATABASE)
    return float(index), float(text)


def _in_child(task: str, database: Path) -> Any:
    """Runs ``task`` (a key of :data:`_TASKS`) on ``database`` in a child Python process and
    returns its result (see the module docstring for why). Costs a process start that
    imports nothing heavy (about 0.1 s). Raises ``StoreError`` if it fails."""
    command = [sys.executable, "-m", "raptor_engine.reclaim", task, str(database)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=VACUUM_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StoreError(f"cannot {task} Chroma's database {database}: {exc}") from exc
    if done.returncode != 0:
        last = (done.stderr.strip() or f"exit status {done.returncode}").splitlines()[-1]
        raise StoreError(f"cannot {task} Chroma's database {database}: {last}")
    return json.loads(done.stdout)


def _measure(database: Path) -> tuple[float, float]:
    with _connected(database, read_only=True) as connection:
        if not connection.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (FULL_TEXT_INDEX,)).fetchone():
            return 0.0, 0.0
        index = connection.execute(f"SELECT total(length(block)) FROM {FULL_TEXT_INDEX}_data").fetchone()[0]
        text = connection.execute(f"SELECT total(length(c0)) FROM {FULL_TEXT_INDEX}_content").fetchone()[0]
    return float(index), float(text)


def _live_segments(database: Path) -> list[str]:
    """The ids of every segment Chroma's database names."""
    with _connected(database, read_only=True) as connection:
        return sorted(str(row[0]) for row in connection.execute("SELECT id FROM segments"))


def _merge_full_text_index(database: Path) -> None:
    with _connected(database, read_only=False) as connection:
        exists = connection.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (FULL_TEXT_INDEX,)).fetchone()
        if exists:  # a database of another Chroma version may lack it: nothing to merge then
            connection.execute(f"INSERT INTO {FULL_TEXT_INDEX}({FULL_TEXT_INDEX}) VALUES ('optimize')")


def _pages(database: Path) -> tuple[int, int, int]:
    """(page size, pages, free pages) of the database."""
    with _connected(database, read_only=True) as connection:
        return tuple(int(connection.execute(f"PRAGMA {name}").fetchone()[0])  # type: ignore[return-value]
                     for name in ("page_size", "page_count", "freelist_count"))


def _free_bytes(database: Path) -> int:
    page_size, _, free = _pages(database)
    return page_size * free


def _worth_compacting(database: Path) -> bool:
    """Whether enough of the file is free pages to pay for rewriting it."""
    page_size, pages, free = _pages(database)
    return free * page_size >= WORTH_COMPACTING_BYTES and free >= WORTH_COMPACTING_SHARE * pages


def _connected(database: Path, read_only: bool) -> closing[sqlite3.Connection]:
    """A connection to Chroma's database that waits for Chroma's locks and is closed on exit
    (sqlite3's own context manager only ends a transaction). Autocommit: each statement
    stands alone, so no lock is held between them."""
    if not database.is_file():  # sqlite3 would create an empty database instead
        raise sqlite3.OperationalError(f"no such file: {database}")
    uri = f"{database.resolve().as_uri()}?mode={'ro' if read_only else 'rw'}"
    return closing(sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None))


def chroma_command() -> str:
    """Chroma's command line: beside this Python (a virtual environment), else on the PATH."""
    beside = Path(sys.executable).parent / "chroma"
    found = str(beside) if beside.is_file() else shutil.which("chroma")
    if not found:
        raise StoreError("Chroma's command line (chroma) is not installed beside this Python nor on the PATH")
    return found


def _remove(directory: Path) -> None:
    try:
        shutil.rmtree(directory)
    except FileNotFoundError:
        pass  # removed meanwhile (another reclaim): nothing left to do
    except OSError as exc:
        raise StoreError(f"cannot remove the orphan Chroma segment {directory}: {exc}") from exc
    log.info("removed the orphan Chroma segment directory %s", directory.name)


def _size(directory: Path) -> int:
    return sum(_file_size(p) for p in directory.rglob("*"))


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


def _integrity(database: Path) -> str:
    """SQLite's own check of the whole file: "ok", or what is wrong."""
    with _connected(database, read_only=True) as connection:
        return "; ".join(str(row[0]) for row in connection.execute("PRAGMA integrity_check"))


def integrity(path: Path) -> str:
    """SQLite's check of the embedded data directory ``path``'s database, made from a child
    process (safe while this process's client is open): "ok", or what is wrong."""
    return str(_in_child("check", path / DATABASE))


def _survey(database: Path) -> dict[str, Any]:
    """What :func:`reclaim` needs to know, in one child process: the live segments, and
    whether compacting is worth it."""
    return {"segments": _live_segments(database), "worth": _worth_compacting(database)}


# What a child process of :func:`_in_child` can do, by name; each returns something JSON can carry.
_TASKS: dict[str, Callable[[Path], Any]] = {
    "segments": _live_segments,
    "merge": _merge_full_text_index,
    "measure": _measure,
    "check": _integrity,
    "survey": _survey,
    "tidy": _tidy,
    "free": _free_bytes,
}


def _child_main(argv: list[str]) -> int:
    """``python -m raptor_engine.reclaim TASK DATABASE``: prints the task's result as JSON."""
    task, database = argv
    try:
        result = _TASKS[task](Path(database))
    except (sqlite3.Error, KeyError) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
