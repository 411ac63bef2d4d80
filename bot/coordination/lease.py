"""One builder per channel across machines: a lease in Redis with a fencing token.

A worker takes a channel's lease before it builds (``SET NX PX``) and renews it from a
thread every third of the lease while it holds it. If the worker dies, the lease ends
on its own ``lease_s`` later and another worker may take it. Each taking draws a new
fencing token (``INCR``), stored in the lease's value. A worker takes it once per job,
around taking the requests, building and telling the requesters; its engine's build
guard is :class:`HeldLeases`, which checks that lease instead of taking it again.

A worker that was paused (SIGSTOP, a stalled VM, a long GC) past its lease comes back
believing it holds the channel. It must not serve its tree: :meth:`ChannelLeases.confirm`,
called by the engine right before the switch, checks in one script that the lease still
carries this holder's token and has at least ``margin`` left, else raises
``BuildSuperseded``. The margin covers the moment between that check and the store's
write; a pause longer than the margin inside those few lines is the one case the check
cannot see, and the store's own rule (only a newer complete tree is served) still holds.

A worker that lives but whose build is stuck (a call that never returns) would renew its
lease for ever, and no other worker could build the channel. With ``stall_s`` (the worker's
``coordination.stall_s``), the holder reports its build's progress (:meth:`Held.progressed`,
from the build's progress callback) and the renewing thread stops renewing once no progress
came for ``stall_s``: the lease then runs out ``lease_s`` later, another worker may take the
channel, and the stuck build, should it come back, cannot serve its tree (``confirm``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from bot.coordination.link import CoordinationDown, RedisLink, describe
from raptor_engine import BuildBusy, BuildProgress, BuildSuperseded, ChannelKey, channel_digest

log = logging.getLogger(__name__)

# KEYS[1] lease; ARGV[1] value: renew only our own lease.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
# KEYS[1] lease; ARGV[1] value, ARGV[2] margin ms: ours, with at least the margin left.
_CONFIRM = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then return 0 end
return 1
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def holder_name() -> str:
    """This process as a lease holder names it: host and pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(slots=True)
class Held:
    """A lease this process holds: its value (token and holder), whether it was seen lost, and
    when its build last made progress (monotonic seconds)."""

    key: ChannelKey
    value: str
    lost: bool = False
    stop: threading.Event = field(default_factory=threading.Event)
    progressed_at: float = field(default_factory=time.monotonic)

    @property
    def token(self) -> int:
        return int(self.value.split("|", 1)[0])

    def progressed(self, event: BuildProgress | None = None) -> None:
        """The build under this lease moved on (a ``ProgressCallback``: callable from any thread)."""
        self.progressed_at = time.monotonic()


class ChannelLeases:
    """The leases of one process; implements the engine's ``BuildGuard`` (a one-shot rebuild
    takes the lease around its build). One hold per channel: holding a lease this process
    holds already raises ``BuildBusy`` like another holder's would. With ``stall_s``, a lease
    whose build made no progress for that long is no longer renewed (see the module docstring);
    None renews it for as long as it is held."""

    def __init__(self, link: RedisLink, lease_s: float, holder: str | None = None,
                 stall_s: float | None = None) -> None:
        self._link = link
        self._stall_s = stall_s
        self._lease_ms = int(lease_s * 1000)
        self._margin_ms = max(self._lease_ms // 3, 500)
        self._holder = holder or holder_name()
        self._held: dict[ChannelKey, Held] = {}
        self._lock = threading.Lock()

    def lease_key(self, key: ChannelKey) -> str:
        return self._link.key("lease", channel_digest(key))

    @contextmanager
    def hold(self, key: ChannelKey) -> Iterator[Held]:
        """Holds ``key``'s lease for the block, renewing it. Raises ``BuildBusy`` at once if
        it is held (by another process, or already by this one), ``CoordinationDown`` if Redis
        cannot be reached."""
        held = self._take(key)
        try:
            yield held
        finally:
            self._let_go(held)

    def holding(self, key: ChannelKey) -> Held | None:
        """The lease of ``key`` this process holds now, if any (as far as it knows: see :meth:`confirm`)."""
        with self._lock:
            return self._held.get(key)

    def confirm(self, key: ChannelKey) -> None:
        """Raises ``BuildSuperseded`` unless this process still holds ``key``'s lease with its
        own token and more than the margin left. Redis unreachable counts as not held."""
        held = self.holding(key)
        if held is None:
            raise BuildSuperseded("the build holds no lease on the channel")
        try:
            ours = self._link.run_sync(
                lambda r: r.eval(_CONFIRM, 1, self.lease_key(key), held.value, self._margin_ms)
            )
        except CoordinationDown:
            raise BuildSuperseded("the coordination server cannot confirm the build's lease") from None
        if not ours:
            held.lost = True
            raise BuildSuperseded(f"its lease (token {held.token}) ran out and another build may hold it")

    def _take(self, key: ChannelKey) -> Held:
        lease_key = self.lease_key(key)

        def take(r: object) -> tuple[bool, str]:
            import redis as _redis

            assert isinstance(r, _redis.Redis)
            token = r.incr(self._link.key("fence", channel_digest(key)))
            value = f"{token}|{self._holder}"
            if r.set(lease_key, value, nx=True, px=self._lease_ms):
                return True, value
            return False, describe(r.get(lease_key) or b"")

        taken, value = self._link.run_sync(take)
        if not taken:
            holder = value.split("|", 1)[-1] or "another worker"
            raise BuildBusy(f"worker {holder}")
        held = Held(key, value)
        with self._lock:
            self._held[key] = held
        threading.Thread(target=self._renew_until_released, args=(held,), name=f"lease {key}", daemon=True).start()
        log.info("channel %s: lease taken (token %d)", key, held.token)
        return held

    def _renew_until_released(self, held: Held) -> None:
        lease_key = self.lease_key(held.key)
        while not held.stop.wait(self._lease_ms / 3000):
            if self._stalled(held):
                return
            try:
                renewed = self._link.run_sync(
                    lambda r: r.eval(_RENEW, 1, lease_key, held.value, self._lease_ms)
                )
            except CoordinationDown:
                continue  # the lease may run out meanwhile; confirm() tells before any switch
            if not renewed and not held.lost:
                held.lost = True
                log.warning("channel %s: lease (token %d) lost; this build will not be served", held.key, held.token)

    def _stalled(self, held: Held) -> bool:
        """Whether ``held``'s build made no progress for ``stall_s`` (then logged, and its lease left to run out)."""
        if self._stall_s is None:
            return False
        idle = time.monotonic() - held.progressed_at
        if idle <= self._stall_s:
            return False
        log.warning("channel %s: the build made no progress for %.0f s; its lease (token %d) is no longer renewed "
                    "and runs out within %.0f s, so another worker may build the channel", held.key, idle, held.token,
                    self._lease_ms / 1000)
        return True

    def _let_go(self, held: Held) -> None:
        with self._lock:
            self._held.pop(held.key, None)
        held.stop.set()
        try:
            self._link.run_sync(lambda r: r.eval(_RELEASE, 1, self.lease_key(held.key), held.value))
        except CoordinationDown:
            log.warning("channel %s: could not release the lease; it ends on its own", held.key)


class HeldLeases:
    """The engine's ``BuildGuard`` where the caller holds the channel's lease around every
    rebuild (the worker holds it around a whole job): :meth:`hold` checks that this process
    holds the lease instead of taking it again; :meth:`confirm` is the leases' own."""

    def __init__(self, leases: ChannelLeases) -> None:
        self._leases = leases

    @contextmanager
    def hold(self, key: ChannelKey) -> Iterator[Held]:
        """The lease this process holds on ``key``, for the block. Raises ``BuildSuperseded``
        if it holds none (a build was started outside a job)."""
        held = self._leases.holding(key)
        if held is None:
            raise BuildSuperseded("the build holds no lease on the channel")
        yield held

    def confirm(self, key: ChannelKey) -> None:
        """See :meth:`ChannelLeases.confirm`."""
        self._leases.confirm(key)
