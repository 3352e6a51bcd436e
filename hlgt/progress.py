"""``Progress``: a long step (annotating, evaluating, solving a file) reported as it goes."""
from __future__ import annotations

import sys
import time


class Progress:
    """Progress of a long step on stderr: one line redrawn on a terminal, a line every tenth of
    the way otherwise (logs), or at every update when the total is not known (``None``: a file
    read as it goes). ``update(done)`` takes the count done so far."""

    def __init__(self, total: int | None, label: str, stream=None) -> None:
        self.total, self.label = total, label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.started = time.perf_counter()
        self.next_line = 0.1
        self.drawn = 0.0

    def update(self, done: int) -> None:
        now = time.perf_counter()
        total = done if self.total is None else self.total
        share = done / max(total, 1)
        if self.tty and (now - self.drawn > 0.2 or done >= total):
            self.drawn = now
            self.stream.write(f"\r{self._text(done, now)}" + ("\n" if self.total is not None and done >= total else ""))
            self.stream.flush()
        elif not self.tty and (share >= self.next_line or done >= total):
            self.next_line = share + 0.1
            print(self._text(done, now), file=self.stream, flush=True)

    def end(self) -> None:
        """Close a redrawn line of an unknown total."""
        if self.tty and self.total is None and self.drawn:
            self.stream.write("\n")
            self.stream.flush()

    def _text(self, done: int, now: float) -> str:
        rate = done / max(now - self.started, 1e-9)
        if self.total is None:
            return f"[{self.label}] {done} ({rate:.1f}/s)"
        return f"[{self.label}] {done}/{self.total} ({100 * done / max(self.total, 1):.0f}%, {rate:.1f}/s)"
