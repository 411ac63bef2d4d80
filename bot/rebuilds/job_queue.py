"""Rebuild jobs on an RQ queue, at most one waiting per channel.

RQ (python-rq) carries the jobs: workers block on the queue, each job runs in one
worker, failures land in RQ's failed registry. On top of it, one marker key per
channel (``queued:<channel>``, ``SET NX``) makes "enqueue a rebuild of this channel"
idempotent: however many replicas run the schedule or forward requests, one job waits
per channel. The worker deletes the marker as it starts the job, so a request made
during the build enqueues the follow-up.

The marker expires after ``job_timeout_s``: a job lost with its marker set (Redis
restarted without persistence) cannot block the channel for longer than that.

Redis is not trusted with what a worker runs. RQ's default stores a job's call with
pickle and imports whatever function, callback and instance a job names; here jobs are
JSON (RQ's ``JSONSerializer``: a pickled record planted in Redis is never unpickled), and
:class:`RebuildJob` imports nothing but :data:`JOB_FUNCTION`. :func:`refusal` says why a
job is not the rebuild job this module enqueues; the worker refuses such a job before
running anything (:class:`bot.rebuilds.worker.RebuildWorker`).
"""

from __future__ import annotations

import logging
from typing import Any

from rq import Queue
from rq.exceptions import DeserializationError
from rq.job import Job, JobStatus
from rq.serializers import JSONSerializer

from bot.coordination.link import RedisLink
from raptor_engine import ChannelKey, channel_digest

log = logging.getLogger(__name__)

JOB_FUNCTION = "bot.rebuilds.worker.run_rebuild_job"
JOB_SERIALIZER = JSONSerializer
RESULT_TTL_S = 3600  # how long RQ keeps a finished job's record (for inspection)
FAILURE_TTL_S = 7 * 24 * 3600
_CALLBACKS = ("success_callback_name", "failure_callback_name", "stopped_callback_name")


def channel_text(key: ChannelKey) -> str:
    return str(key)


def channel_from_text(text: str) -> ChannelKey:
    """The inverse of :func:`channel_text`. Raises ``ValueError`` for anything else."""
    return ChannelKey.parse(text)


class RefusedJob(RuntimeError):
    """A job that is not the bot's rebuild job was about to be run."""


class RebuildJob(Job):
    """RQ's job as the bot's queues and workers load it from Redis: it imports and calls the
    rebuild job only, never a callback, and sends no webhook. The worker refuses any other
    job before running it; this covers RQ's other paths too (its registries' clean-up runs
    an abandoned job's failure callback and sends its webhooks)."""

    @property
    def func(self) -> Any:
        """The rebuild job's function. Raises :class:`RefusedJob` for any other job."""
        reason = refusal(self)
        if reason:
            raise RefusedJob(reason)
        return super().func

    @property
    def success_callback(self) -> None:
        return None  # the bot's jobs have none: one named in Redis is not imported

    @property
    def failure_callback(self) -> None:
        return None

    @property
    def stopped_callback(self) -> None:
        return None

    def send_webhooks(self, status: str | JobStatus, *, exc_string: str | None = None) -> None:
        """Sends nothing: the bot's jobs have no webhooks, and one named in Redis is not called."""
        if self.webhooks:
            log.warning("RQ job %s: its webhooks were not sent (the bot's jobs have none)", self.id)


def refusal(job: Job) -> str:
    """Why ``job`` is not a rebuild job as :meth:`RebuildQueue.enqueue_once` makes them, or ''
    if it is one: the rebuild function, one channel key argument, no keyword arguments, no
    instance, callbacks, webhooks or dependencies. Imports nothing the job names; a record
    that is not JSON is not loaded. Raises whatever RQ raises on a record it cannot read."""
    record = job.to_dict(include_meta=False, include_result=False)
    if any(record.get(name) for name in _CALLBACKS):
        return "it names callbacks"
    if job.webhooks:
        return "it has webhooks"
    if job.dependency_ids or job.dependent_ids:
        return "it has dependencies"
    try:
        func_name, instance, args, kwargs = job.func_name, job.instance, job.args, job.kwargs
    except DeserializationError:
        return "its call is not JSON (such as a pickled job): it was not loaded"
    if func_name != JOB_FUNCTION or instance is not None:
        return f"it calls {str(func_name)[:80]!r}, not the rebuild job"
    if kwargs or not isinstance(args, list | tuple) or len(args) != 1 or not isinstance(args[0], str):
        return "its arguments are not one channel key"
    try:
        channel_from_text(args[0])
    except ValueError:
        return "its argument is not a channel key"
    return ""


class RebuildQueue:
    """The rebuild jobs of one namespace. Blocking calls: run them in a thread from a loop."""

    def __init__(self, link: RedisLink, job_timeout_s: int) -> None:
        self._link = link
        self._job_timeout_s = job_timeout_s
        self.queue = Queue(f"{link.namespace}-rebuilds", connection=link.blocking, serializer=JOB_SERIALIZER,
                           job_class=RebuildJob)

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
