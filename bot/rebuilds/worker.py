"""The rebuild worker: ``python -m bot worker``.

It takes rebuild jobs from the RQ queue (:mod:`~bot.rebuilds.job_queue`), one
at a time, in this process (RQ's ``SimpleWorker``: the engine, its embedding model and
its clustering process stay loaded between jobs). A job of a channel:

1. drops the channel's queue marker, so a request made from now on enqueues a follow-up;
2. takes the channel's lease (another worker holds it: the job ends, that worker builds
   again for whatever was requested meanwhile before it lets the lease go);
3. under the lease, takes the waiting requests (and those a dead worker left), builds
   (the engine's build guard checks the job's lease; it does not take it again), and
   tells the requesters through the reply stream, which a front-end posts: once per
   channel or thread asked from, however many asked there;
4. builds again while requests came in meanwhile, then lets the lease go.

A job with no requesters (a scheduled check) builds only if the channel's sources
changed since its served tree. If the lease runs out under the worker (it was paused,
or its build reported no progress for ``coordination.stall_s``, so it stopped renewing
the lease: see :mod:`bot.coordination.lease`), the engine refuses to serve its tree
(``BuildSuperseded``) and nobody is told by this worker: the one that took over tells them.

Any other job found on the queue (someone else wrote to Redis: another function, a
pickled call, callbacks, webhooks) is refused before anything it names is loaded, marked
failed and logged, and the worker takes the next job (:class:`RebuildWorker`). A worker
posts nothing itself and needs no chat platform's token (deploy it without them): its
replies are signed entries of the reply stream, which front-ends post.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass

from redis.exceptions import ConnectionError as RedisConnectionError, TimeoutError as RedisTimeoutError
from rq import Queue, SimpleWorker
from rq.job import Job, JobStatus

from bot.config import Config
from bot.coordination.lease import ChannelLeases, Held, holder_name
from bot.coordination.link import CoordinationDown, RedisLink
from bot.coordination.reply_stream import ReplyPublisher
from bot.coordination.signing import RecordSigner
from bot.engine_calls import AsyncEngine
from bot.model_budget import ModelBudget, SharedSpending
from bot.neutral import Reply, ReplyAddress, Send
from bot.observability.metrics import Metrics
from bot.rebuilds.job_queue import FAILURE_TTL_S, JOB_SERIALIZER, RebuildJob, RebuildQueue, channel_from_text, refusal
from bot.rebuilds.report import held_back_news, rebuild_and_report
from bot.rebuilds.requests import RebuildRequests, Requester
from bot.rebuilds.schedule import sources_changed
from raptor_engine import BuildBusy, BuildSuperseded, ChannelKey

log = logging.getLogger(__name__)

RECONNECT_S = 1.0  # between attempts to reach the coordination server


@dataclass(frozen=True, slots=True)
class WorkerContext:
    """Everything a job needs, made once per worker process."""

    config: Config
    engine: AsyncEngine
    link: RedisLink
    leases: ChannelLeases
    queue: RebuildQueue
    requests: RebuildRequests
    publisher: ReplyPublisher
    metrics: Metrics
    budget: ModelBudget

    def sender(self, address: ReplyAddress) -> Send:
        """A ``Send`` that hands the reply to the front-ends of the address's platform."""

        async def send(reply: Reply) -> None:
            await asyncio.to_thread(self.publisher.publish, address, reply)

        return send


_context: WorkerContext | None = None


def install(context: WorkerContext) -> None:
    """Makes ``context`` the one :func:`run_rebuild_job` uses (RQ calls jobs by name)."""
    global _context
    _context = context


def run_rebuild_job(channel: str) -> str:
    """The RQ job: rebuilds ``channel`` (``platform/workspace/channel``) for whoever asked.
    Returns the outcome (``built``, ``failed``, ``unchanged``, ``busy``, ``superseded``,
    ``redis down``), which RQ keeps as the job's result."""
    if _context is None:
        raise RuntimeError("run_rebuild_job runs in a worker started by bot.rebuilds.worker.serve_worker")
    key = channel_from_text(channel)
    started = time.monotonic()
    try:
        _context.queue.taken(key)
        with _context.leases.hold(key) as held:
            outcome = asyncio.run(_build_for_requesters(_context, key, held))
    except BuildBusy as busy:
        outcome = "busy"
        _context.metrics.observe_rebuild("busy", time.monotonic() - started)
        log.info("channel %s: %s builds it; it builds again for requests made meanwhile", key, busy.holder)
    except BuildSuperseded as superseded:
        outcome = "superseded"
        log.warning("channel %s: %s", key, superseded)
    except CoordinationDown:
        outcome = "redis down"  # its requests stay in Redis; a front-end's sweep enqueues them again
    log.info("channel %s: job ended (%s) after %.1f s", key, outcome, time.monotonic() - started)
    return outcome


async def _build_for_requesters(context: WorkerContext, key: ChannelKey, held: Held) -> str:
    outcome = "unchanged"
    while True:
        requesters = context.requests.take(key, context.leases, held)
        if not requesters and not sources_changed(await context.engine.stats(key)):
            return outcome
        outcome = await _build_once(context, key, requesters, held)
        if context.requests.finish(key, context.leases, held) == 0:
            return outcome


async def _build_once(context: WorkerContext, key: ChannelKey, requesters: list[Requester], held: Held) -> str:
    """One build, its result told to every requester, each of its steps reported to the lease
    ``held`` (which stops being renewed when they stop). Raises ``BuildSuperseded`` untold."""
    why = "requested by " + ", ".join(r.by or "?" for r in requesters) if requesters else "scheduled"
    log.info("channel %s: rebuild started (%s)", key, why)
    # One post per place asked from: requests merged into this build from one channel or
    # thread are told there once, not once each.
    addresses = list(dict.fromkeys(r.address for r in requesters))
    sends = [context.sender(address) for address in addresses]
    held.progressed()  # a build starting is progress: the time before it (another build, the store) is not its own
    reply, error = await rebuild_and_report(context.engine, key, sends, context.config.bot.progress_every_s, why,
                                            context.metrics, context.budget, watch=held.progressed,
                                            force=any(r.force for r in requesters))
    if isinstance(error, BuildSuperseded):
        raise error  # whoever took over tells them
    if not requesters and held_back_news(error):  # a scheduled build: nobody asked, the channel is told once
        try:
            await context.sender(ReplyAddress(key))(reply)
        except CoordinationDown:
            log.warning("channel %s: could not say the scheduled rebuild was held back: Redis is down", key)
    for address, send in zip(addresses, sends):
        try:
            await send(Reply(reply.kind, reply.text, reference=reply.reference, thread=address.thread))
        except CoordinationDown:
            log.warning("channel %s: could not tell %s the result: Redis is down", key,
                        ", ".join(r.by or "?" for r in requesters if r.address == address))
    return "failed" if error is not None else "built"


class RebuildWorker(SimpleWorker):
    """RQ's worker running jobs in this process, which runs the rebuild job only.

    Every job is checked (:func:`~bot.rebuilds.job_queue.refusal`) before RQ prepares it:
    any other job is marked failed with the reason, without running it, its callbacks or
    its webhooks, and logged; the worker goes on with the next job."""

    def execute_job(self, job: Job, queue: Queue) -> None:
        try:
            reason = refusal(job)
        except Exception:  # a record RQ itself cannot read: refused the same way
            log.debug("RQ job %s could not be read", job.id, exc_info=True)
            reason = "its record cannot be read"
        if reason:
            self._refuse(job, queue, reason)
            return
        super().execute_job(job, queue)

    def _refuse(self, job: Job, queue: Queue, reason: str) -> None:
        log.warning("refused RQ job %s on queue %s: %s (someone else wrote to the coordination server); "
                    "it was not run and is marked failed", job.id, queue.name, reason)
        try:
            queue.intermediate_queue.remove(job.id)  # or RQ's clean-up would fail it again, later
            with self.connection.pipeline() as pipe:
                job.set_status(JobStatus.FAILED, pipeline=pipe)
                queue.failed_job_registry.add(job, ttl=FAILURE_TTL_S, exc_string=f"refused: {reason}", pipeline=pipe)
                pipe.execute()
        except Exception:
            log.warning("could not mark the refused RQ job %s failed", job.id, exc_info=True)


def rebuild_worker(queue: RebuildQueue, link: RedisLink, name: str) -> RebuildWorker:
    """A worker of ``queue``'s jobs, reading them as JSON into :class:`RebuildJob` s."""
    return RebuildWorker([queue.queue], connection=link.blocking, name=name, serializer=JOB_SERIALIZER,
                         job_class=RebuildJob)


def serve_worker(config: Config, engine: AsyncEngine, link: RedisLink, leases: ChannelLeases, metrics: Metrics) -> int:
    """Runs jobs until SIGTERM/SIGINT (RQ's warm shutdown: the job running ends first;
    a second signal stops at once, and the job's requests are picked up again). ``engine``
    must be built with ``HeldLeases(leases)`` as its build guard: each job holds the lease,
    its build checks it. Returns the exit status."""
    queue = RebuildQueue(link, config.coordination.job_timeout_s)
    signer = RecordSigner(config.coordination.secret.get_secret_value())
    budget = ModelBudget(config.bot.model_budget, SharedSpending(link))
    install(WorkerContext(config, engine, link, leases, queue, RebuildRequests(link, signer),
                          ReplyPublisher(link, signer), metrics, budget))
    name = f"{holder_name()}-{uuid.uuid4().hex[:6]}"
    while True:
        try:
            worker = rebuild_worker(queue, link, name)
            worker.work(with_scheduler=False)
            return 0
        except (RedisConnectionError, RedisTimeoutError) as exc:
            # RQ retries a lost connection while it waits for jobs; it raises when the server is
            # unreachable as it starts or registers. The link logs the outage once.
            link.mark_down(exc)
            time.sleep(RECONNECT_S)
