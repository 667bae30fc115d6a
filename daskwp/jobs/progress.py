"""A one-line text progress bar for batch jobs: parts written of the parts to write, with
the text throughput (a line per tenth on a file or pipe)."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """A one-line text progress bar on stderr (silent when ``quiet``)."""

    def __init__(self, label: str, total: int, quiet: bool, total_bytes: int = 0):
        self.label, self.total, self.quiet = label, total, quiet
        self.done = 0
        self.bytes = 0
        self.total_bytes = total_bytes
        self.t0 = time.perf_counter()
        self.tty = sys.stderr.isatty()
        self._last_print = 0.0
        self._last_decile = -1
        if not quiet and total:
            self._show(force=True)

    def update(self, n: int = 1, nbytes: int = 0) -> None:
        self.done += n
        self.bytes += nbytes
        if not self.quiet and self.total:
            self._show(force=self.done == self.total)

    def close(self) -> None:
        """End the bar's line if the job stopped before it was full (an error, an
        interrupt), so that the next message starts on a line of its own."""
        if not self.quiet and self.total and self.tty and self.done < self.total:
            sys.stderr.write("\n")
            sys.stderr.flush()

    def _show(self, force: bool = False) -> None:
        now = time.perf_counter()
        frac = self.done / self.total
        if self.tty:
            if not force and now - self._last_print < 0.2:
                return
            width = 30
            fill = int(round(frac * width))
            el = now - self.t0
            rate = f"  {self.bytes / 1e6 / el:7.1f} MB/s" if self.bytes and el > 0 else ""
            sys.stderr.write(f"\r{self.label:<10} [{'#' * fill}{'.' * (width - fill)}] "
                             f"{self.done}/{self.total}{rate}  {el:6.1f} s")
            if self.done == self.total:
                sys.stderr.write("\n")
        else:
            decile = int(frac * 10)
            if decile == self._last_decile or self.done == 0:
                return
            self._last_decile = decile
            el = now - self.t0
            rate = f", {self.bytes / 1e6 / el:.1f} MB/s" if self.bytes and el > 0 else ""
            sys.stderr.write(f"{self.label}: {self.done}/{self.total} partitions "
                             f"({100 * frac:.0f}%, {el:.1f} s{rate})\n")
        sys.stderr.flush()
