"""Observability for the running bot: Prometheus metrics, health endpoints and JSON logs.

* :mod:`bot.observability.metrics`: :class:`Metrics`, the process's counters and histograms,
  in a registry of its own;
* :mod:`bot.observability.endpoints`: :class:`HealthServer`, ``/metrics``, ``/healthz`` and
  ``/readyz`` over aiohttp;
* :mod:`bot.observability.log_format`: :class:`JsonFormatter`, one JSON object per log line,
  carrying the channel being served and the process's role.

None of these modules configures logging: the entry point installs :func:`json_handler`
where it wants it.
"""

from bot.observability.endpoints import HealthServer, Probe
from bot.observability.log_format import (
    JsonFormatter,
    channel_context,
    current_channel,
    json_handler,
    set_process_role,
)
from bot.observability.metrics import CONTENT_TYPE, QUESTION_OUTCOMES, Metrics

__all__ = [
    "CONTENT_TYPE",
    "QUESTION_OUTCOMES",
    "HealthServer",
    "JsonFormatter",
    "Metrics",
    "Probe",
    "channel_context",
    "current_channel",
    "json_handler",
    "set_process_role",
]
