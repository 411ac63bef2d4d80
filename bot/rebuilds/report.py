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
from collections.abc import Sequence

from bot.engine_calls import AsyncEngine
from bot.errors import log_failure, names_servers, new_reference
from bot.neutral import Reply, ReplyKind, Send
from bot.observability.metrics import Metrics
from bot.rebuilds.relay import ProgressRelay
from bot.replies import error_text, rebuild_failed_text, report_sentence
from raptor_engine import BuildBusy, BuildSuperseded, ChannelKey, NothingToBuild, RaptorError

log = logging.getLogger(__name__)


async def rebuild_and_report(engine: AsyncEngine, key: ChannelKey, sends: Sequence[Send], progress_every_s: float,
                             why: str, metrics: Metrics | None = None) -> tuple[Reply, Exception | None]:
    """Rebuilds ``key``, relaying progress to ``sends``, and returns the reply that tells the
    result (not sent yet) with the error that ended the build, if any. Engine errors become
    the person's reply; anything else is logged with a reference the reply quotes. Raises
    only ``CancelledError`` (the progress relay is stopped first)."""
    relay = ProgressRelay(sends, progress_every_s) if sends else None
    error: Exception | None = None
    started = time.monotonic()
    try:
        report = await engine.rebuild(key, relay)
    except asyncio.CancelledError:
        if relay is not None:
            relay.cancel()
        raise
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
    if metrics is not None:
        metrics.observe_rebuild(_outcome(error), time.monotonic() - started)
    if relay is not None:
        await relay.close()  # no progress reply may arrive after the result
    return reply, error


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
    return "failed"
