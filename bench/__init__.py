"""Benchmarks of the engine: ``python -m bench.build``, ``bench.query``, ``bench.retrieval``.

Importing the package sets, unless already set, what every benchmark needs
before Hugging Face or numba are imported: no model hub, no progress bars,
and numba's on-disk cache in ``.cache/numba`` (as the Makefile sets it).
"""

import os

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(_REPO, ".cache", "numba"))
