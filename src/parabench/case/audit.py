"""Checks at the file: the figures a user reads, held against counts that did not pass through
the same code, after the result is assembled and just before it is appended.

Usage::

    problems = audit(result)      # [] when every figure agrees with its evidence
    result = audited(result)      # the same result, or failed with the disagreements as reason

The case checks its sessions' claims as it trains (:func:`parabench.case.parts.checked_samples`:
each epoch's and window's samples against the loaders' count). A figure can still go wrong
after that, while the case folds its ranks' records into one result, assembles it, or the
runner stamps it, and nothing inside the case would see it. So :func:`audit` runs on the result
the file will hold (:func:`parabench.sweep.run.record`, the tail of every front end) and
recomputes each figure from :class:`~parabench.core.records.Evidence` sent beside it:

* **samples** - each speed window's samples against what the loaders served in it;
* **samples/s** - the median of the steady windows' served samples over their seconds (their
  own samples where no count was served), and the figure inside its own confidence interval;
* **seconds** - the steady windows' seconds against the span the lifecycle saw them take on
  the host clock (their sum cannot exceed it, and windows of steps fill most of it; where the
  windows are parts trained for quality, the sum of their stretches' spans);
* **cores** (CPU seconds per wall second, "ran on ~1 core") - the case's own reading against
  the runner's, taken from outside the case by sampling the process tree over the same span;
* **time to target** - the samples at each evaluation against the loaders' count up to it,
  and the training seconds up to the target within the epochs' seconds.

A figure with no evidence (a result from before evidence was sent, torchrun's cores, a session
that keeps no served count) is not checked; one that disagrees fails the case, naming both
figures. The tolerances allow for floating point and for the runner's 50 ms sampling; a doubled
figure or one process of a tree measured for all is far outside them.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from parabench.case.result import Result
from parabench.core.records import Evidence

#: a figure recomputed from the same numbers in another order agrees to this (relative)
REL = 1e-6
#: the case's cores and the runner's may differ by CORES_ABS plus CORES_REL of the larger:
#: the runner samples every 50 ms (each end of the span interpolated) in CPU ticks of 10 ms
CORES_ABS, CORES_REL = 0.25, 0.2
#: the cores are compared over spans of at least this many seconds
MIN_SPAN_S = 0.5
#: steady windows of steps fill at least this share of their span (between them only the
#: energy counters and the confidence interval are read: 98-100 % measured); a window of one
#: fit, round or epoch may leave work of its own outside its clock (61-94 %), so for those only
#: the upper bound holds
MIN_SPAN_SHARE = 0.75


def audit(result: Result) -> list[str]:
    """What disagrees in ``result`` (an ok one; others are not checked), one line each."""
    if result.status != "ok" or result.evidence is None:
        return []
    ev = result.evidence
    return [*_window_samples(result, ev), *_speed(result, ev), *_seconds(result, ev),
            *_cores(result, ev), *_time_to_target(result, ev)]


def audited(result: Result) -> Result:
    """``result``, or failed with the disagreements as its reason (the figures kept, so the
    row shows what was claimed)."""
    problems = audit(result)
    if not problems:
        return result
    return dataclasses.replace(result, status="failed",
                               reason="figures disagree: " + "; ".join(problems))


def _near(a: float, b: float, rel: float = REL) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def _window_samples(result: Result, ev: Evidence) -> list[str]:
    if not ev.window_served:
        return []
    if len(ev.window_served) != len(result.window_samples):
        return [f"{len(result.window_samples)} speed windows, the loaders counted "
                f"{len(ev.window_served)}"]
    return [f"window {i}: {claimed} samples, the loaders served {served}"
            for i, (claimed, served) in enumerate(zip(result.window_samples, ev.window_served,
                                                      strict=True))
            if served is not None and claimed != served]


def _steady(result: Result, values: list) -> list:
    return values[result.window.warmup if result.window else 0:]


def _speed(result: Result, ev: Evidence) -> list[str]:
    served = _steady(result, ev.window_served)
    seconds = _steady(result, result.window_s)
    if served and None not in served and len(served) == len(seconds):
        rates = [n / s for n, s in zip(served, seconds, strict=True) if s > 0]
    else:  # no served count (TensorFlow, the forests): the windows' own samples
        rates = result.window_rates
    if not rates:
        return []
    figure, expected = result.samples_per_s, statistics.median(rates)
    if figure is None or not _near(figure, expected):
        return [f"samples/s {_fmt(figure)}, the windows' samples / seconds give "
                f"{_fmt(expected)}"]
    ci = result.samples_per_s_ci
    if ci and not (ci[0] * (1 - REL) <= figure <= ci[1] * (1 + REL)):
        return [f"samples/s {_fmt(figure)} outside its own CI "
                f"[{_fmt(ci[0])}, {_fmt(ci[1])}]"]
    return []


def _seconds(result: Result, ev: Evidence) -> list[str]:
    if not ev.windows_span or not result.window_s:
        return []
    span = _span_s(ev)
    timed = sum(_steady(result, result.window_s))
    if timed > span * (1 + 1e-3) + 1e-3:
        return [f"windows {timed:.3f} s by their clock, only {span:.3f} s passed around them"]
    steps = result.window is not None and result.window.unit == "steps"
    if steps and span >= MIN_SPAN_S and timed < MIN_SPAN_SHARE * span:
        return [f"windows {timed:.3f} s by their clock, under {MIN_SPAN_SHARE:.0%} of the "
                f"{span:.3f} s around them"]
    return []


def _cores(result: Result, ev: Evidence) -> list[str]:
    inside, outside = result.window_cores, ev.outside_cores
    if inside is None or outside is None or not ev.windows_span or _span_s(ev) < MIN_SPAN_S:
        return []
    if abs(inside - outside) <= CORES_ABS + CORES_REL * max(inside, outside):
        return []
    return [f"cores {inside:.2f} (CPU s per wall s), the runner saw {outside:.2f} from outside"]


def _span_s(ev: Evidence) -> float:
    """The seconds the steady windows' stretches took on the host clock."""
    return sum(end - start for start, end in ev.window_spans or [ev.windows_span or [0, 0]])


def _time_to_target(result: Result, ev: Evidence) -> list[str]:
    ttt = result.time_to_target
    if ttt is None:
        return []
    problems = []
    if ev.eval_served and len(ev.eval_served) == len(ttt.eval_samples):
        problems += [f"evaluation {i + 1}: {claimed} samples, the loaders served {served}"
                     for i, (claimed, served) in enumerate(zip(ttt.eval_samples, ev.eval_served,
                                                               strict=True))
                     if served is not None and claimed != served]
    elif ev.eval_served:
        problems.append(f"{len(ttt.eval_samples)} evaluations, the lifecycle counted "
                        f"{len(ev.eval_served)}")
    if (ttt.samples_to_target is not None and ev.eval_served and None not in ev.eval_served
            and ttt.samples_to_target not in ev.eval_served):
        problems.append(f"samples to target {ttt.samples_to_target}: no evaluation's served "
                        f"count")
    trained = sum(result.epoch_s)
    if ttt.train_s is not None and ttt.train_s > trained * (1 + REL) + 1e-9:
        problems.append(f"time to target {ttt.train_s:.3f} s, the epochs took {trained:.3f} s")
    return problems


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:,.1f}"
