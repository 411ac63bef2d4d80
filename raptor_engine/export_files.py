"""The files of the embedding model's ONNX export: its name, where it is found, and when an
old one is removed.

**Its name says what its content is made of.** ``<model>-<place>-<content>.onnx``: ``place``
is a digest of the model directory's path (one model directory, one series of exports),
``content`` a digest of the export's format and of every file of the model (path, size and
SHA-256 of its bytes; not the ``.md`` files). A model file that is copied again unchanged
(an image rebuilt, a package reinstalled: new modification times, same bytes) keeps its
export; a changed one gets a new export. Hashing the model's ~90 MB costs about 0.25 s, so
the content digest is remembered in a *fingerprint* file beside the exports
(``<model>-<place>.fingerprint``), keyed by the files' sizes and modification times: a
process whose model files are as the fingerprint saw them reads the digest and hashes nothing.

**Where it is found.** The install (the Docker build, ``make install``) exports the packaged
model into the installation's *seed* directory (:func:`seed_dir`, read-only at run time is
fine), with its fingerprint; the runtime loads the seed's export when its name is the one
the model's files give, and else keeps its own export in its cache directory.

**An old export is removed** by :func:`remove_stale` once a process has loaded the current
one: the cache directory's other exports of the same model directory (an older content, or
the mtime-named exports of earlier versions). A process loading an export holds a shared
``flock`` on its ``.lock`` file while ONNX Runtime reads it (after that, the file is no
longer needed: unlinking it is harmless); the remover takes that lock exclusively without
waiting and leaves alone an export it cannot lock, so two processes sharing a cache
directory never pull a file from under one another's load. An exporting child holds the
same lock exclusively: a loader that finds it taken loads the model another way.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger(__name__)

SUBDIRECTORY = "model-cache"
"""Name of the directory holding exports, in the seed and in the user's cache."""
SEED_ENV_VAR = "RAPTOR_MODEL_SEED"
"""Where the install's exports are, when not at their default place (see :func:`seed_dir`)."""

_PLACE_CHARS, _CONTENT_CHARS = 8, 16


def seed_dir() -> Path:
    """The installation's exports: ``$RAPTOR_MODEL_SEED``, else
    ``<sys.prefix>/share/raptor-chat/model-cache`` (inside the virtual environment, or the
    image's Python), where ``raptor_engine.install_export`` writes at install."""
    configured = os.environ.get(SEED_ENV_VAR)
    return Path(configured) if configured else Path(sys.prefix) / "share" / "raptor-chat" / SUBDIRECTORY


def export_name(model_dir: Path, export_format: int, fingerprint_dirs: tuple[Path, ...], write_dir: Path) -> str:
    """The file name of the export of the model in ``model_dir`` made in ``export_format``.
    The content digest is read from the first fingerprint in ``fingerprint_dirs`` that matches
    the files' sizes and modification times, or else computed and its fingerprint written
    into ``write_dir`` (when it can be: an unwritable directory only costs the next process
    the hashing again)."""
    files = _model_files(model_dir)
    # Whole seconds: an image layer keeps no finer modification times, and the seed's
    # fingerprint, written at build, must match the files the container sees.
    seen = _digest(f"{rel} {path.stat().st_size} {int(path.stat().st_mtime)}" for rel, path in files)
    fingerprint = f"{_series(model_dir)}.fingerprint"
    content = next(filter(None, (_remembered(d / fingerprint, seen) for d in fingerprint_dirs)), None)
    if content is None:
        content = _digest([f"format {export_format}"]
                          + [f"{rel} {path.stat().st_size} {_file_sha256(path)}" for rel, path in files])
        _remember(write_dir / fingerprint, seen, content)
    return f"{_series(model_dir)}-{content[:_CONTENT_CHARS]}.onnx"


def lock_path(export: Path) -> Path:
    """The lock file of ``export`` (held exclusively by the child exporting it or by a
    remover, shared by a process loading it)."""
    return export.with_name(f".{export.name}.lock")


@contextmanager
def loading(export: Path) -> Iterator[bool]:
    """Holds ``export`` for reading while the block runs; yields whether it is there to read.
    False when it is missing, or when its lock is held exclusively (an export of it being
    written, or its removal). An export in a directory this process cannot write in (a
    read-only seed) is read without a lock: nothing removes files from there."""
    try:
        lock = lock_path(export).open("a")
    except OSError:
        yield export.is_file()
        return
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield export.is_file()


def remove_stale(cache_dir: Path, model_dir: Path, current: Path) -> list[Path]:
    """Removes the exports of ``model_dir`` in ``cache_dir`` other than ``current`` (which may
    be in another directory, the seed), with their lock files; returns the ones removed. An
    export some process is loading (its lock held) is left for a later call."""
    stale = re.compile(rf"{re.escape(model_dir.name)}-(?:{re.escape(_place(model_dir))}-)?[0-9a-f]{{16}}\.onnx")
    try:
        candidates = [p for p in cache_dir.iterdir() if stale.fullmatch(p.name) and p != current]
    except OSError:  # no cache directory: nothing kept there
        return []
    return [export for export in candidates if _remove_unused(export)]


def _remove_unused(export: Path) -> bool:
    """Removes ``export`` and its lock file unless another process holds the lock."""
    try:
        with lock_path(export).open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            size = export.stat().st_size
            export.unlink()
            # A loader that opened the lock file before this unlink locks a file of no name
            # afterwards and finds no export: it loads the model another way.
            lock_path(export).unlink()
    except BlockingIOError:
        return False
    except OSError as exc:
        log.warning("cannot remove the old embedding model export %s: %s", export, exc)
        return False
    log.info("removed the old embedding model export %s (%.0f MB)", export, size / 1e6)
    return True


def _model_files(model_dir: Path) -> list[tuple[str, Path]]:
    """The model's files that make its export, by path relative to ``model_dir``, sorted."""
    files = (p for p in model_dir.rglob("*") if p.is_file() and p.suffix != ".md")
    return sorted((str(p.relative_to(model_dir)), p) for p in files)


def _series(model_dir: Path) -> str:
    """``<model>-<place>``: what every export of this model directory's name starts with."""
    return f"{model_dir.name}-{_place(model_dir)}"


def _place(model_dir: Path) -> str:
    return hashlib.sha256(str(model_dir.resolve()).encode()).hexdigest()[:_PLACE_CHARS]


def _digest(lines: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(f"{line}\n".encode())
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _remembered(fingerprint: Path, seen: str) -> str | None:
    """The content digest a fingerprint holds, if it saw the files as ``seen``."""
    try:
        memo = json.loads(fingerprint.read_text())
        return str(memo["content"]) if memo["files"] == seen else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remember(fingerprint: Path, seen: str, content: str) -> None:
    """Writes a fingerprint (under a temporary name, then renamed: a reader never sees half)."""
    partial = fingerprint.with_name(f".{fingerprint.name}.{os.getpid()}.tmp")
    try:
        fingerprint.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps({"files": seen, "content": content}))
        os.replace(partial, fingerprint)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        log.debug("cannot keep the model's fingerprint %s: %s", fingerprint, exc)
