"""One builder per channel among the processes of one machine that share a Chroma server.

With a Chroma server, several processes (a bot, a one-shot ``rebuild`` beside it,
replicas on one host) can build the same channel. The store keeps a served tree
safe from them (see :mod:`raptor_engine.store`), but two builds of one channel at
once are wasted work, and the slower one's tree is thrown away. Here each rebuild
takes an exclusive ``fcntl.flock`` on a lock file per server and channel, without
waiting: a second builder gets ``BuildBusy`` naming the first. The kernel drops
the lock when its holder exits in any way, so a file left behind blocks nobody.

Processes on other machines do not see these files; there the store's own checks
(a switch serves only a newer complete tree, a broken served tree heals) are what
protects the channel. The embedded store needs none of this: its data directory
has one process (see :mod:`bot.data_lock`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bot.data_lock import LockHeld, take_lock_file
from raptor_engine import BuildBusy, ChannelKey, channel_digest


class MachineBuildLocks:
    """Build locks of one Chroma server's channels, kept as files under ``directory``
    (created on first use). Implements :class:`raptor_engine.protocols.BuildGuard`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def for_server(cls, home: Path, host: str, port: int, tenant: str, database: str) -> MachineBuildLocks:
        """The locks of one server's database, under ``home/build-locks``. Processes must name
        the server the same way (``localhost`` and ``127.0.0.1`` are two names)."""
        server = hashlib.sha256(f"{host}:{port}/{tenant}/{database}".encode()).hexdigest()[:16]
        return cls(home / "build-locks" / server)

    @contextmanager
    def hold(self, key: ChannelKey) -> Iterator[None]:
        """Holds ``key``'s build lock for the block. Raises ``BuildBusy`` at once if another
        open lock (another process, or another rebuild of this one) holds it."""
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            fd = take_lock_file(self.directory / f"{channel_digest(key)}.lock")
        except LockHeld as held_elsewhere:
            raise BuildBusy(held_elsewhere.holder) from None
        try:
            yield
        finally:
            os.close(fd)  # releases the lock

    def confirm(self, key: ChannelKey) -> None:
        """Nothing: the kernel keeps a lock file's lock until its holder ends."""
