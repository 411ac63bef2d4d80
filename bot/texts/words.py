"""The small words every text is made of: counts, moments, short ids, sizes, waits.

Contract: these are the ONLY formats used for these things in any text a person reads
(chat replies, the command line, the tree outline and picture); a module writing one
of them by hand instead is a bug.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone

SHORT_ID = 12  # characters of a source id shown to people; enough to forget it by
MEGABYTE = 1024 * 1024  # as files.max_mb


def count(n: int, noun: str, plural: str = "") -> str:
    """``1 source``, ``3 sources``, ``1,200 summaries`` (``plural`` when not just ``noun + "s"``)."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


def short_id(source_id: str) -> str:
    """The first :data:`SHORT_ID` characters of a source id: what lists show and ``forget`` takes."""
    return source_id[:SHORT_ID]


def when(moment: str | datetime) -> str:
    """An ISO-8601 string or a datetime as ``2024-05-01 14:03 UTC`` (a naive one is taken as
    UTC); an empty string as ``at an unknown time``; an unparsable string as is."""
    if isinstance(moment, str):
        if not moment:
            return "at an unknown time"
        try:
            parsed = datetime.fromisoformat(moment)
        except ValueError:
            return moment
        return when(parsed)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def ago(moment: str, now: datetime | None = None) -> str:
    """``just now``, ``5 minutes ago``, ``3 hours ago``, ``2 days ago`` for an ISO-8601 moment
    (a naive one is taken as UTC); empty for an empty or unparsable one."""
    try:
        then = datetime.fromisoformat(moment) if moment else None
    except ValueError:
        return ""
    if then is None:
        return ""
    then = then if then.tzinfo else then.replace(tzinfo=timezone.utc)
    elapsed = max(0.0, ((now or datetime.now(timezone.utc)) - then).total_seconds())
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if elapsed >= size:
            return f"{count(int(elapsed // size), unit)} ago"
    return "just now"


def seconds(value: float) -> str:
    """A duration as ``18.9 s``."""
    return f"{value:.1f} s"


def in_time(wait_s: float) -> str:
    """``in 42 seconds``, ``in 3 minutes``, ``in 2 hours`` (rounded up: never too early)."""
    whole = max(1, math.ceil(wait_s))
    if whole < 90:
        return f"in {count(whole, 'second')}"
    minutes = math.ceil(whole / 60)
    if minutes < 90:
        return f"in {count(minutes, 'minute')}"
    return f"in {count(math.ceil(minutes / 60), 'hour')}"


def megabytes(size: int) -> str:
    """``100 MB``, ``2.5 MB``, ``12 KB``, ``1.2 KB`` (binary units, as ``files.max_mb``)."""
    value, unit = (size / MEGABYTE, "MB") if size >= MEGABYTE // 10 else (size / 1024, "KB")
    shown = f"{value:,.0f}" if value >= 10 else f"{value:.1f}".removesuffix(".0")
    return f"{shown} {unit}"


def node_kind(layer: int) -> str:
    """``Excerpt`` (layer 0) or ``Summary (layer N)``; lower-case it inside a sentence."""
    return "Excerpt" if layer == 0 else f"Summary (layer {layer})"


def capitalised(text: str) -> str:
    """``text`` with its first character upper-cased (the rest kept)."""
    return text[:1].upper() + text[1:]
