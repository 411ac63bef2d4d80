"""Where the bot keeps what is not channel data: caches of the machine and of the user.

Light on purpose (nothing heavy imported): a one-shot command reads it before it loads
the engine, to start the clustering worker early.
"""

from __future__ import annotations

import os
from pathlib import Path

from bot.config import Config


def machine_home(config: Config) -> Path:
    """Where this machine's own files go: numba's compiled kernels (``numba-cache``) and, with
    a Chroma server, the channels' build locks (``build-locks``). The data directory of an
    embedded store; with a Chroma server, which leaves the data directory unused, the user's
    cache directory (:func:`user_cache`)."""
    if not config.chroma.host:
        return config.data_dir
    return user_cache()


def user_cache() -> Path:
    """The user's cache directory for this program, ``$XDG_CACHE_HOME/raptor-chat`` (by default
    ``~/.cache/raptor-chat``): what belongs to the machine and not to one data directory, such
    as the embedding model's ONNX export (``model-cache``), made once per model and machine."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "raptor-chat"
