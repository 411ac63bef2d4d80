"""Progress display: a bar on a terminal, a line per stage elsewhere, or nothing if asked."""

from __future__ import annotations

import io

from bot.progress import TerminalProgress
from raptor_engine.tree import BuildProgress


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def events() -> list[BuildProgress]:
    return [BuildProgress("embed", 0, 300), BuildProgress("embed", 256, 300), BuildProgress("embed", 300, 300),
            BuildProgress("cluster", 0, 1, layer=1), BuildProgress("summarise", 3, 8, layer=1)]


def test_plain_lines_one_per_stage_when_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = TerminalProgress(stream)
    for event in events():
        progress(event)
    progress.close()
    assert stream.getvalue().splitlines() == ["embed (300)", "layer 1: cluster (1)", "layer 1: summarise (8)"]


def test_silent_when_asked_and_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = TerminalProgress(stream, plain_lines=False)
    for event in events():
        progress(event)
    progress.close()
    assert stream.getvalue() == ""


def test_a_bar_on_a_terminal() -> None:
    stream = FakeTerminal()
    progress = TerminalProgress(stream)
    for event in events():
        progress(event)
    progress.close()
    assert "layer 1: summarise" in stream.getvalue() and "3/8" in stream.getvalue()
