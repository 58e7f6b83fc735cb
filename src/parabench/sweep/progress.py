"""Sweep progress: a live line on a terminal (rich), one line per finished case elsewhere.

Usage::

    progress = Progress(total=len(cases), runnable=n_to_run)
    progress.show(label, "epoch 2/3")       # current case and its latest line (terminal only)
    progress.case_done(label, result)       # advances; off a terminal prints one line
    progress.finish()

On a terminal the display is rich's live progress (cases done/total, a bar, elapsed, ETA,
the current case and epoch), fitted to the terminal's width, with finished cases printed
above it. Without rich, or when the
stream is not a terminal (a CI log, a pipe), each finished case prints one plain line with
the same counts, elapsed and ETA. The ETA is the mean wall time of the cases that actually
ran, times the runnable cases left: skipped and resumed cases take no time and do not count.
Where cases run at once (a cluster's jobs), the line also counts the jobs queued, running and
done, and the ETA uses the elapsed time per finished case instead.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from parabench.analysis.stats import rate_text, windows_text
from parabench.case.result import Result


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60:02d}:{rem % 60:02d}"


def case_summary(result: Result) -> str:
    """'ok 0.041 s/epoch, 50,072 ±3.0% samples/s (8 windows of 415 steps)', or 'failed: <first
    line of the reason>'. Speed is the median of the steady windows with its 95 % CI
    (:mod:`parabench.sweep.table`); results without windows show the figure alone."""
    if result.status != "ok":
        reason = (result.reason or "").strip().splitlines()
        return f"{result.status}: {reason[0][:120]}" if reason else result.status
    parts = []
    if (t := result.median_epoch_s) is not None:
        parts.append(f"{t:.3f} s/epoch")
    if result.samples_per_s:
        speed = f"{rate_text(result.samples_per_s, result.samples_per_s_ci)} samples/s"
        parts.append(speed + (f" ({w})" if (w := windows_text(result)) else ""))
    return "ok" + (f" {', '.join(parts)}" if parts else "")


class Progress:
    """Progress of one sweep; ``enabled`` forces (True) or silences (False) the live display."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool | None = None,
                 runnable: int | None = None) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0
        self.started = time.monotonic()
        self._runnable_left = total if runnable is None else runnable
        self._ran: list[float] = []
        self._case_started: float | None = None
        self._live: Any = None
        self._task: Any = None
        self._jobs = ""  # a cluster's jobs: queued, running, done (jobs())

    def eta_s(self) -> float | None:
        """Seconds left: mean duration of cases that ran x runnable cases left; when cases
        run at once (a cluster's jobs, :meth:`jobs`), the elapsed time per case that ran
        instead, which counts them running side by side."""
        if not self._ran:
            return None
        if self._jobs:
            per_case = (time.monotonic() - self.started) / len(self._ran)
            return per_case * max(0, self._runnable_left)
        return sum(self._ran) / len(self._ran) * max(0, self._runnable_left)

    def _counts(self) -> str:
        eta = self.eta_s()
        return (f"[{self.done}/{self.total}] {_clock(time.monotonic() - self.started)} elapsed"
                f", ETA {'?' if eta is None else _clock(eta)}{self._jobs}")

    def jobs(self, queued: int, running: int, done: int) -> None:
        """The executor's jobs now (a cluster's): on the live line and every case's line;
        off a terminal, a line of its own whenever the counts change."""
        text = f", jobs {queued} queued / {running} running / {done} done"
        if text == self._jobs:
            return
        self._jobs = text
        if self.enabled:
            self.show("", text[2:])
        else:
            self.stream.write(self._counts() + "\n")
            self.stream.flush()

    def show(self, label: str, detail: str = "") -> None:
        if self._case_started is None:
            self._case_started = time.monotonic()
        if not self.enabled:
            return
        if self._live is None and not self._start_live():
            return
        self._live.update(self._task, completed=self.done, eta=self._eta_text(),
                          case=f"{label}  {detail}".strip())
        self._live.refresh()

    def case_done(self, label: str, result: Result, seconds: float | None = None) -> None:
        """``seconds``: the case's own wall time, for cases that ran at once (a cluster's
        jobs); else the time since its first :meth:`show`."""
        if seconds is not None:
            self._ran.append(seconds)
            self._runnable_left -= 1
        elif self._case_started is not None and result.status != "skipped":
            self._ran.append(time.monotonic() - self._case_started)
            self._runnable_left -= 1
        self._case_started = None
        self.done += 1
        line = f"{self._counts()}  {label}: {case_summary(result)}"
        if self.enabled:
            self.show(label, result.status)
        if self.enabled:  # above the live line, so finished cases stay in the scroll-back
            self._live.console.print(line, markup=False, highlight=False, overflow="ellipsis",
                                     no_wrap=True)
        else:  # not a terminal, or rich missing (show() turned the display off)
            self.stream.write(line + "\n")
            self.stream.flush()

    def finish(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _eta_text(self) -> str:
        eta = self.eta_s()
        return "ETA ?" if eta is None else f"ETA {_clock(eta)}"

    def _start_live(self) -> bool:
        """Start rich's display; False (plain lines instead) when rich is not installed."""
        try:
            from rich.console import Console
            from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress
        except ImportError:
            self.enabled = False
            return False
        console = Console(file=self.stream, force_terminal=True)
        self._live = RichProgress(
            TextColumn("[{task.completed}/{task.total}]", markup=False), BarColumn(bar_width=20),
            TimeElapsedColumn(), TextColumn("{task.fields[eta]}"),
            TextColumn("{task.fields[case]}", markup=False),
            console=console, auto_refresh=False, transient=True,
        )
        self._task = self._live.add_task("sweep", total=self.total, eta="ETA ?", case="")
        self._live.start()
        return True
