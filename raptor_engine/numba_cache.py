"""numba's on-disk cache of compiled kernels, kept where it survives restarts.

UMAP's first fit in a process compiles numba kernels (10 to 45 s on a small,
busy machine). numba can keep compiled machine code on disk, in
``NUMBA_CACHE_DIR``, so that the next process loads it in a fraction of that
time; but it only does so for functions declared ``cache=True``. pynndescent
declares all of its own; umap-learn (0.5) declares almost none of the kernels
a fit uses, so every process compiled them again. Two steps fix that:

- :func:`use_cache_dir` points ``NUMBA_CACHE_DIR`` at a directory of the
  caller's choice (the bot uses ``<data_dir>/numba-cache``) unless the
  environment already names one. numba reads the variable once, when it is
  first imported, so this must run before anything imports numba (umap,
  pynndescent). Processes spawned afterwards (the clustering worker) inherit
  it through the environment.
- :func:`cache_umap_kernels`, called right after ``import umap`` and before
  the first fit, switches numba's caching on for UMAP's uncached kernels.

numba keys its cache by source file and its timestamp, the function's byte
code, the argument types and the CPU, so upgrading umap or numba or moving to
another CPU simply compiles once more; stale entries are never loaded.

A new data directory would still compile everything in its first rebuild. So the
install (``make install``, the Docker build) runs ``python -m raptor_engine.install_kernels``, which compiles
the kernels once into the installation's own *seed* cache (:func:`seed_dir`, under
the Python prefix), and :func:`use_cache_dir` copies the seed into a cache directory
that holds no kernels yet (a few MB). Kernels compiled on another CPU (an image built
elsewhere) are not loaded: that first rebuild compiles, as before.
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import sys
from pathlib import Path

log = logging.getLogger(__name__)

ENV_VAR = "NUMBA_CACHE_DIR"
"""The environment variable numba reads for its cache directory."""
SUBDIRECTORY = "numba-cache"
"""Name of the cache directory under the data directory."""
SEED_ENV_VAR = "RAPTOR_NUMBA_SEED"
"""Where the install's seed cache is, when not at its default place (see :func:`seed_dir`)."""

# The modules holding the kernels of the UMAP fit that clustering runs.
_UMAP_MODULES = ("umap.umap_", "umap.layouts", "umap.utils")


def use_cache_dir(data_dir: Path) -> Path:
    """Make ``<data_dir>/numba-cache`` numba's cache directory, unless one is set.

    Returns the directory in effect. An already set ``NUMBA_CACHE_DIR`` wins
    (an operator's choice, or a shared cache of several data directories)
    and is returned as is. The directory is created here (numba would create
    it too, but a directory that cannot be created should show up at start,
    not in the first rebuild).

    Contract: effective for this process only when numba has not been
    imported yet (a warning is logged otherwise); always effective for
    processes started afterwards, which inherit the environment.
    """
    configured = os.environ.get(ENV_VAR)
    if configured:
        _seed_quietly(Path(configured))
        return Path(configured)
    directory = (data_dir / SUBDIRECTORY).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    _seed_quietly(directory)
    os.environ[ENV_VAR] = str(directory)
    if "numba" in sys.modules:  # only asks whether it was imported (tests/test_architecture.py allows that)
        # Why a warning and no reload: numba.core.config.reload_config()
        # re-reads every numba setting mid-flight; new processes get it right.
        log.warning("numba was imported before its cache directory was set; "
                    "only new processes will use %s", directory)
    else:
        log.debug("numba's cache directory is %s", directory)
    return directory


def seed_dir() -> Path:
    """The installation's seed cache: ``$RAPTOR_NUMBA_SEED``, else
    ``<sys.prefix>/share/raptor-chat/numba-cache`` (inside the virtual environment, or the
    image's Python), where ``raptor_engine.install_kernels`` writes at install."""
    configured = os.environ.get(SEED_ENV_VAR)
    return Path(configured) if configured else Path(sys.prefix) / "share" / "raptor-chat" / SUBDIRECTORY


def seed_from(seed: Path, directory: Path) -> int:
    """Copies the kernels of ``seed`` into the cache ``directory`` when it holds none yet (no
    index file); returns how many files were copied (0: no seed, or kernels there already,
    which are never overwritten)."""
    if not seed.is_dir() or any(directory.rglob("*.nbi")):
        return 0
    shutil.copytree(seed, directory, dirs_exist_ok=True)
    copied = sum(1 for path in seed.rglob("*") if path.is_file())
    log.info("numba's cache %s seeded with %d files of the kernels compiled at install", directory, copied)
    return copied


def _seed_quietly(directory: Path) -> None:
    """:func:`seed_from` the install's seed; a seed that cannot be copied only costs the
    first rebuild its compile (logged)."""
    try:
        seed_from(seed_dir(), directory)
    except OSError as exc:
        log.warning("numba's cache %s could not be seeded from %s: %s", directory, seed_dir(), exc)


def cache_umap_kernels() -> int:
    """Switch numba's on-disk caching on for UMAP's kernels that lack it.

    Call after ``import umap`` and before its first fit (a kernel compiled
    already is not written to disk until it is compiled again). Idempotent.
    Returns how many kernels were switched on.

    Where one Python function backs several kernels (umap's layout epoch is
    compiled both with ``parallel=True`` and without), only the
    ``parallel=False`` one is cached: numba's cache index does not tell the
    two apart, and clustering runs UMAP single-threaded (seeded).
    """
    # Imported here: importing numba costs a second, and only a UMAP fit needs it.
    from numba.core.caching import NullCache
    from numba.core.registry import CPUDispatcher

    by_function: dict[int, list[CPUDispatcher]] = {}
    for name in _UMAP_MODULES:
        module = importlib.import_module(name)  # loaded already by ``import umap``: a look-up
        for value in vars(module).values():
            if isinstance(value, CPUDispatcher) and value.py_func.__module__ == name:
                by_function.setdefault(id(value.py_func), []).append(value)
    switched = 0
    for kernels in by_function.values():
        serial = [k for k in kernels if not k.targetoptions.get("parallel")]
        chosen = kernels if len(kernels) == 1 else serial[:1]
        for kernel in chosen:
            if isinstance(getattr(kernel, "_cache", None), NullCache):  # numba's private field: no API reads it
                kernel.enable_caching()
                switched += 1
    if switched:
        log.debug("numba on-disk caching switched on for %d UMAP kernels", switched)
    return switched
