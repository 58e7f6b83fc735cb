"""How long a speed window is and how many a case takes: the rule, apart from the session
that trains them.

Usage::

    rule = window_rule(asked=None)           # the default: WINDOWS, more while the CI is wide
    rule.stop([1000.0, 1010.0], 0.5)         # None: take another steady window; else why not
    window_rule(asked=4).stop([1000.0] * 4, 1.0)             # 'asked': exactly 4 were asked for
    steps_for(EpochStats(seconds=2.0, loss=0.0, samples=1000), 64)  # a window_target_s() window

:meth:`WindowRule.stop` takes the steady windows' samples/s so far and their seconds. Without a
count asked for, a case takes ``WINDOWS`` steady windows, then more while the 95 % CI of
their median is wider than ``CI_TARGET`` (the larger side, as the table prints it), up to
``MAX_WINDOWS``; once the windows have taken ``WINDOW_BUDGET_S`` it stops after
``MIN_WINDOWS``. :class:`~parabench.case.lifecycle.CaseLifecycle` follows the rule window by
window, and ``scripts/window_coverage.py`` replays it on recorded window series to measure
how often the CI it stops on covers the case's long-run speed (docs/measurements.md, "How
many speed windows").
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from parabench.case.bootstrap import ci_half_pct, median_ci
from parabench.case.parts import TimedPart
from parabench.method import EpochStats

#: seconds a speed window aims at when ``--steps`` is not given (a window's clock reads are
#: microseconds: far below 0.1 % of it). 0.25 s windows, 5 of them before the CI may stop them,
#: took half the seconds of 8+ windows of 0.5 s, and their CI held the case's later speed no
#: less often (scripts/window_coverage.py on 60 recorded series; docs/measurements.md, "How
#: many speed windows")
WINDOW_TARGET_S = 0.25
#: steady windows per case after the warm-up one (``--windows``; ``$PARABENCH_WINDOWS``)
WINDOWS = 5
#: ... but once the windows have taken WINDOW_BUDGET_S, stop after MIN_WINDOWS of them
MIN_WINDOWS = 3
WINDOW_BUDGET_S = 10.0
#: with no count asked for, windows go on past WINDOWS while their CI's half-width (the larger
#: side, as the table prints it) is above CI_TARGET, up to MAX_WINDOWS and the budget: two
#: single-thread ranks in lockstep on 2 cores (gloo all-reduce ~1.4 ms) varied 10-15 % from
#: window to window, and 8 windows then left a CI of 3-23 % for the same mlp ddp case
CI_TARGET = 0.05
#: 8, not 16: on 60 recorded series the rule stopping at 8 held the case's later speed as
#: often as at 16 (75 %: the drift within a case, not the count, is what the CI misses) for
#: 1.74 s of windows a case against 2.13 s, and on a noisy machine half of a default run's
#: cases went on to 16 (scripts/window_coverage.py --most; docs/measurements.md, "How many
#: speed windows")
MAX_WINDOWS = 8
#: the most steps one window may have (a pathological calibration cannot run for hours)
MAX_WINDOW_STEPS = 100_000


def window_target_s() -> float:
    """WINDOW_TARGET_S, or ``$PARABENCH_WINDOW_S`` (a test suite's short windows)."""
    try:
        return float(os.environ.get("PARABENCH_WINDOW_S", "")) or WINDOW_TARGET_S
    except ValueError:
        return WINDOW_TARGET_S


def steps_for(stats: EpochStats, batch_size: int | None, target_s: float | None = None) -> int:
    """Steps that make a window of ``target_s`` (default: :func:`window_target_s`) at
    ``stats``'s time per global step."""
    target_s = target_s or window_target_s()
    if not batch_size or stats.seconds <= 0 or stats.samples <= 0:
        return 1
    steps = -(-stats.samples // batch_size)
    return max(1, min(MAX_WINDOW_STEPS, round(target_s * steps / stats.seconds)))


def ci_wide(rates: Sequence[float], target: float = CI_TARGET) -> bool:
    """Whether the median's 95 % CI over ``rates`` is wider than ``target`` on either side
    (fewer than two rates: wide)."""
    pct = ci_half_pct(statistics.median(rates), median_ci(rates)) if len(rates) > 1 else None
    return pct is None or pct > 100 * target


@dataclass(frozen=True)
class WindowRule:
    """When a case stops taking steady speed windows (see the module doc)."""

    wanted: int = WINDOWS
    most: int = MAX_WINDOWS
    #: None: exactly ``wanted`` (a count asked for), whatever the CI
    ci_target: float | None = CI_TARGET
    budget_s: float = WINDOW_BUDGET_S
    least: int = MIN_WINDOWS

    def stop(self, rates: Sequence[float], spent: float, taken: int | None = None) -> str | None:
        """Why no further window after ``rates`` that took ``spent`` seconds ("budget",
        "ci narrow", "asked", "most"); None: take another. ``taken``: the windows taken, where
        some had no rate (a zero-second window); default ``len(rates)``."""
        k = len(rates) if taken is None else taken
        if k >= self.least and spent >= self.budget_s:
            return "budget"
        if k >= self.wanted and (self.ci_target is None or not ci_wide(rates, self.ci_target)):
            return "ci narrow" if self.ci_target is not None else "asked"
        return "most" if k >= max(self.wanted, self.most) else None


def rule_id(target_s: float | None, asked: int | None) -> str:
    """A name for the rule a case's windows followed (the cost history's ``window_rule``):
    its window length and the count asked for, or the default count, "ci" and the most."""
    t = f"{target_s or 0:g}s"
    return f"{t} x{asked}" if asked else f"{t} x{WINDOWS}+ci..{MAX_WINDOWS}"


def window_rule(asked: int | None) -> WindowRule:
    """The rule for a case: ``asked`` steady windows exactly (``--windows``), else the default
    (the module's constants as they are now: a test may set them)."""
    if asked is not None:
        return WindowRule(wanted=asked, most=asked, ci_target=None, budget_s=WINDOW_BUDGET_S,
                          least=MIN_WINDOWS)
    return WindowRule(wanted=WINDOWS, most=MAX_WINDOWS, ci_target=CI_TARGET,
                      budget_s=WINDOW_BUDGET_S, least=MIN_WINDOWS)


def stretches(blocks: Sequence[TimedPart]) -> tuple[float | None, list[float],
                                                    list[list[float]] | None]:
    """(cores, span, spans) of the stretches of steady windows ``blocks``: the CPU seconds
    per wall second inside them, [the first one's start, the last one's end], and each one's
    [start, end] where there is more than one (else None)."""
    wall = sum(b.span[1] - b.span[0] for b in blocks)
    cores = round(sum(b.cpu_s for b in blocks) / wall, 3) if wall > 0 else None
    spans = [b.span for b in blocks] if len(blocks) > 1 else None
    return cores, [blocks[0].span[0], blocks[-1].span[1]], spans
