"""Compiles UMAP's numba kernels into the installation's seed cache, once, at install.

Run as ``python -m raptor_engine.install_kernels`` by ``make install`` and the Docker build,
in a fresh process (numba reads its cache directory when first imported). A new data
directory's cache is then seeded from it (see ``numba_cache.py``), so its first rebuild
loads the kernels instead of compiling them (10 to 45 s on a small, busy machine).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from raptor_engine.numba_cache import ENV_VAR, seed_dir


def compile_seed() -> Path:
    """Compiles UMAP's kernels into :func:`~raptor_engine.numba_cache.seed_dir`; returns it.
    Raises ``RuntimeError`` when numba was imported already (the kernels would go elsewhere)."""
    if "numba" in sys.modules:  # only asks whether it was imported (tests/test_architecture.py allows that)
        raise RuntimeError("compile_seed must run before anything imports numba")
    seed = seed_dir()
    seed.mkdir(parents=True, exist_ok=True)
    os.environ[ENV_VAR] = str(seed)
    from raptor_engine import clustering  # imports umap, then numba, which reads the variable just set

    clustering.warm_up()
    return seed


if __name__ == "__main__":
    started = time.perf_counter()
    where = compile_seed()
    print(f"UMAP's kernels compiled into {where} in {time.perf_counter() - started:.1f} s")
