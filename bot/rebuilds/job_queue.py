"""Rebuild jobs on an RQ queue, at most one waiting per channel.

RQ (python-rq) carries the jobs: workers block on the queue, each job runs in one
worker, failures land in RQ's failed registry. On top of it, one marker key per
channel (``queued:<channel>``, ``SET NX``) makes "enqueue a rebuild of this channel"
idempotent: however many replicas run the schedule or forward requests, one job waits
per channel. The worker deletes the marker as it starts the job, so a request made
during the build enqueues the follow-up.

The marker expires after ``job_timeout_s``: a job lost with its marker set (Redis
restarted without persistence) cannot block the channel for longer than that.
"""

from __future__ import annotations

import logging

from rq import Queue

from bot.coordination.link import RedisLink
from raptor_engine import ChannelKey, channel_digest

log = logging.getLogger(__name__)

JOB_FUNCTION = "bot.rebuilds.worker.run_rebuild_job"
RESULT_TTL_S = 3600  # how long RQ keeps a finished job's record (for inspection)
FAILURE_TTL_S = 7 * 24 * 3600


def channel_text(key: ChannelKey) -> str:
    return str(key)


def channel_from_text(text: str) -> ChannelKey:
    """The inverse of :func:`channel_text`. Raises ``ValueError`` for anything else."""
    return ChannelKey.parse(text)


class RebuildQueue:
    """The rebuild jobs of one namespace. Blocking calls: run them in a thread from a loop."""

    def __init__(self, link: RedisLink, job_timeout_s: int) -> None:
        self._link = link
        self._job_timeout_s = job_timeout_s
        self.queue = Queue(f"{link.namespace}-rebuilds", connection=link.blocking)

    def marker(self, key: ChannelKey) -> str:
        return self._link.key("queued", channel_digest(key))

    def enqueue_once(self, key: ChannelKey, reason: str) -> bool:
        """Enqueues a rebuild of ``key`` unless one waits already; True if this call did.
        Raises ``CoordinationDown``."""
        marker = self.marker(key)
        if not self._link.run_sync(lambda r: r.set(marker, reason, nx=True, ex=self._job_timeout_s)):
            return False
        try:
            self._link.run_sync(lambda r: self.queue.enqueue(
                JOB_FUNCTION, channel_text(key),
                job_timeout=self._job_timeout_s, result_ttl=RESULT_TTL_S, failure_ttl=FAILURE_TTL_S,
                description=f"rebuild {key} ({reason})",
            ))
        except BaseException:
            self._link.run_sync(lambda r: r.delete(marker))  # or no job could ever be enqueued again
            raise
        log.info("channel %s: rebuild job enqueued (%s)", key, reason)
        return True

    def taken(self, key: ChannelKey) -> None:
        """Called by the worker as a job of ``key`` starts: the next request enqueues again."""
        self._link.run_sync(lambda r: r.delete(self.marker(key)))

    def waiting(self, key: ChannelKey) -> bool:
        """Whether a job of ``key`` waits in the queue. Raises ``CoordinationDown``."""
        return bool(self._link.run_sync(lambda r: r.exists(self.marker(key))))

    def depth(self) -> int:
        """Jobs waiting in the queue. Raises ``CoordinationDown``."""
        return int(self._link.run_sync(lambda r: self.queue.count))
