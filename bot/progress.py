"""Build progress on a terminal: a progress bar per stage, or plain lines when not a terminal."""

from __future__ import annotations

import sys
from typing import TextIO

from raptor_engine import BuildProgress


class TerminalProgress:
    """A ``ProgressCallback`` that draws a tqdm bar on a terminal and prints a line
    per stage change otherwise (logs, pipes), so progress never floods a file."""

    def __init__(self, stream: TextIO | None = None, plain_lines: bool = True) -> None:
        """``stream`` defaults to ``sys.stderr`` as it is now (not as it was at import: a
        caller, or a test, may have replaced it since). ``plain_lines=False`` shows nothing at
        all when ``stream`` is not a terminal."""
        self._stream = stream if stream is not None else sys.stderr
        self._interactive = self._stream.isatty()
        self._plain_lines = plain_lines
        self._bar = None
        self._current: tuple[str, int] | None = None

    def __call__(self, event: BuildProgress) -> None:
        stage = (event.stage, event.layer)
        if stage != self._current:
            self.close()
            self._current = stage
            label = f"layer {event.layer}: {event.stage}" if event.layer else event.stage
            if self._interactive:
                from tqdm import tqdm

                self._bar = tqdm(total=event.total, desc=label, file=self._stream, leave=False)
            elif self._plain_lines:
                print(f"{label} ({event.total})", file=self._stream, flush=True)
        if self._bar is not None:
            self._bar.n = event.done
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
