"""One rebuild run and its result put into a reply; both rebuild services build through it.

:func:`rebuild_and_report` relays the build's progress, turns its outcome (a report, an
engine error, a bug) into the reply that tells it, and counts it in the metrics. The
in-process scheduler sends that reply to whoever asked; a worker sends it through the
reply stream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from bot.engine_calls import AsyncEngine
from bot.errors import log_failure, names_servers, new_reference
from bot.model_budget import ModelBudget, ModelBudgetReached
from bot.neutral import Reply, ReplyKind, Send
from bot.observability.metrics import Metrics
from bot.rebuilds.relay import ProgressRelay
from bot.replies import error_text, held_back_text, rebuild_failed_text, report_sentence
from raptor_engine import (
    BuildBusy,
    BuildHeldBack,
    BuildProgress,
    BuildSuperseded,
    ChannelKey,
    ModelUsage,
    NothingToBuild,
    RaptorError,
)

log = logging.getLogger(__name__)


async def rebuild_and_report(engine: AsyncEngine, key: ChannelKey, sends: Sequence[Send], progress_every_s: float,
                             why: str, metrics: Metrics | None = None,
                             budget: ModelBudget | None = None,
                             watch: Callable[[BuildProgress], None] | None = None,
                             force: bool = False) -> tuple[Reply, Exception | None]:
    """Rebuilds ``key``, relaying progress to ``sends`` (and every step to ``watch``, from the
    build's threads: a worker's lease watches it), and returns the reply that tells the
    result (not sent yet) with the error that ended the build, if any. Engine errors become
    the person's reply; anything else is logged with a reference the reply quotes. With a
    ``budget``, a workspace that used up its daily model budget is not rebuilt (the reply
    says so, the error is :class:`~bot.model_budget.ModelBudgetReached`), and what a build's
    model calls cost is counted against it. ``force`` serves the tree past the regression
    gate. Raises only ``CancelledError`` (the progress relay is stopped first)."""
    spent = await budget.reached(key) if budget is not None else ""
    if budget is not None and spent:
        refusal = ModelBudgetReached(budget.refusal(spent))
        log.info("channel %s: rebuild not started (%s): the workspace used up its daily model %s", key, why, spent)
        if metrics is not None:
            metrics.observe_rebuild(_outcome(refusal), 0.0)
        return Reply(ReplyKind.INFO, str(refusal)), refusal
    relay = ProgressRelay(sends, progress_every_s) if sends else None
    error: Exception | None = None
    started = time.monotonic()
    try:
        report = await engine.rebuild(key, _each(relay, watch), force)
    except asyncio.CancelledError:
        if relay is not None:
            relay.cancel()
        raise
    except BuildHeldBack as exc:  # the gate did its job: no failure, the person decides
        error = exc
        reply = Reply(ReplyKind.INFO, held_back_text(exc.reason))
        log.warning("channel %s: rebuild held back (%s): %s", key, why, exc.reason)
    except RaptorError as exc:
        error = exc
        reference = new_reference() if names_servers(exc) else ""  # its message is the log's only
        reply = Reply(ReplyKind.ERROR, error_text(exc, reference), reference=reference)
        log.warning("channel %s: rebuild failed (%s): %s%s", key, why, exc,
                    f" (reference {reference})" if reference else "", extra={"reference": reference})
    except Exception as exc:
        error = exc
        reference = log_failure(log, "channel %s: rebuild failed unexpectedly (reference %s)", key)
        reply = Reply(ReplyKind.ERROR, rebuild_failed_text(reference), reference=reference)
    else:
        reply = Reply(ReplyKind.INFO, report_sentence(report))
        log.info("channel %s: rebuild finished (%s): %s", key, why, reply.text)
        if metrics is not None:
            metrics.count_model_calls("summary", report.model_calls, report.prompt_tokens + report.completion_tokens)
        if budget is not None:
            await budget.record(key, ModelUsage(calls=report.model_calls, prompt_tokens=report.prompt_tokens,
                                                completion_tokens=report.completion_tokens))
    if metrics is not None:
        metrics.observe_rebuild(_outcome(error), time.monotonic() - started)
    if relay is not None:
        await relay.close()  # no progress reply may arrive after the result
    return reply, error


def held_back_news(error: Exception | None) -> bool:
    """Whether ``error`` is a rebuild held back by the regression gate that the channel was not
    told of yet (the same sources held back for the same reason are told once)."""
    return isinstance(error, BuildHeldBack) and not error.repeated


def _each(*callbacks: Callable[[BuildProgress], None] | None) -> Callable[[BuildProgress], None] | None:
    """One progress callback calling every one of ``callbacks`` given; None when none is."""
    given = [callback for callback in callbacks if callback is not None]
    if len(given) < 2:
        return given[0] if given else None

    def each(event: BuildProgress) -> None:
        for callback in given:
            callback(event)

    return each


def _outcome(error: Exception | None) -> str:
    """A rebuild's outcome as the metrics label it."""
    if error is None:
        return "built"
    if isinstance(error, BuildBusy):
        return "busy"
    if isinstance(error, BuildSuperseded):
        return "superseded"
    if isinstance(error, NothingToBuild):
        return "nothing_to_build"
    if isinstance(error, BuildHeldBack):
        return "held_back"
    if isinstance(error, ModelBudgetReached):
        return "budget_reached"
    return "failed"
