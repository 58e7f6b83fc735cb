"""``parabench compare BASE NEW``: did throughput or parity get worse between two results files?

Usage::

    cmp = compare(read_results("base.jsonl"), read_results("new.jsonl"), threshold=0.10)
    print(format_comparison(cmp))
    sys.exit(1 if cmp.regressed else 0)

Cases are matched by identity (workload, method, device, workers, batch, profile, options,
epochs, seed; repeats are pooled; skipped cases are left out). For each pair the change is
NEW's median throughput / BASE's; its significance is a two-sided Mann-Whitney test on the
throughput samples of both sides (per-repeat throughputs with repeats, steady epochs
otherwise: :mod:`parabench.analysis.stats`), with a bootstrap CI of the ratio. A pair *regresses*
when NEW is slower by more than the threshold AND the difference is significant, when parity
held in BASE and fails in NEW, or when a case ok in BASE is failed / timeout / oom in NEW.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from parabench.analysis.stats import (
    ALPHA,
    mann_whitney_p,
    p_text,
    ratio_ci,
    throughput_samples,
)
from parabench.case.result import FAILED_STATUSES, Result
from parabench.identity import CaseId


def parse_threshold(text: str) -> float:
    """'10%' or '0.1' -> 0.1; ValueError with what is valid otherwise."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ValueError(f"threshold {text!r} is not a percentage like 10% or a fraction "
                         "like 0.1") from None
    if not 0 <= value < 1:
        raise ValueError(f"threshold {text!r} must be between 0% and 100%")
    return value


@dataclass(frozen=True, kw_only=True)
class Change:
    key: tuple
    base_status: str
    new_status: str
    #: NEW median throughput / BASE's (< 1 is slower)
    ratio: float | None = None
    ratio_ci: tuple[float, float] | None = None
    p_value: float | None = None
    samples: str = ""
    quality_delta: float | None = None
    base_parity: str = "-"
    new_parity: str = "-"
    verdict: str = "same"

    @property
    def regressed(self) -> bool:
        return self.verdict.startswith(("SLOWER", "PARITY", "BROKEN"))


@dataclass(frozen=True, kw_only=True)
class Comparison:
    changes: list[Change]
    only_base: list[tuple]
    only_new: list[tuple]
    threshold: float

    @property
    def regressed(self) -> bool:
        return any(c.regressed for c in self.changes)


def _parity(rs: list[Result]) -> str:
    statuses = {r.parity.status for r in rs if r.parity}
    if any(r.parity and r.parity.kind == "baseline" for r in rs):
        return "base"
    return "failed" if "failed" in statuses else "ok" if "ok" in statuses else "-"


def _key(r: Result) -> tuple:
    """The case's identity: the report's grouping plus epochs and seed (the same work)."""
    return CaseId.recorded(r).work


def _quality(rs: list[Result]) -> float | None:
    values = [r.quality.value for r in rs if r.status == "ok" and r.quality
              and r.quality.value is not None]
    return sorted(values)[len(values) // 2] if values else None


def _status(rs: list[Result]) -> str:
    statuses = [r.status for r in rs]
    return "ok" if "ok" in statuses else statuses[0]


def _change(key: tuple, base: list[Result], new: list[Result], threshold: float) -> Change:
    b_status, n_status = _status(base), _status(new)
    b_par, n_par = _parity(base), _parity(new)
    common = dict(key=key, base_status=b_status, new_status=n_status, base_parity=b_par,
                  new_parity=n_par)
    if b_status == "ok" and n_status in FAILED_STATUSES:
        return Change(**common, verdict=f"BROKEN: {n_status}")
    if b_status != "ok" or n_status != "ok":
        return Change(**common, verdict="not comparable")
    bs, ns = throughput_samples(base), throughput_samples(new)
    if not bs.values or not ns.values:
        return Change(**common, verdict="no timings")
    ratio = ns.median / bs.median
    p = mann_whitney_p(ns.values, bs.values)
    q_b, q_n = _quality(base), _quality(new)
    significant = p < ALPHA
    if b_par != "failed" and n_par == "failed":
        verdict = "PARITY FAILED"
    elif ratio < 1 / (1 + threshold) and significant:
        verdict = f"SLOWER {1 / ratio - 1:.0%}"
    elif ratio > 1 + threshold and significant:
        verdict = f"faster {ratio - 1:.0%}"
    else:
        verdict = "within threshold" if significant else "same (not significant)"
    return Change(**common, ratio=ratio, ratio_ci=ratio_ci(ns.values, bs.values), p_value=p,
                  samples=f"{bs.describe()} vs {ns.describe()}",
                  quality_delta=None if q_b is None or q_n is None else q_n - q_b,
                  verdict=verdict)


def compare(base: Iterable[Result], new: Iterable[Result], threshold: float = 0.10
            ) -> Comparison:
    """Match cases by identity and judge each pair (see the module docstring)."""
    b_groups: dict[tuple, list[Result]] = defaultdict(list)
    n_groups: dict[tuple, list[Result]] = defaultdict(list)
    for groups, results in ((b_groups, base), (n_groups, new)):
        for r in results:
            if r.status != "skipped":  # a case that cannot run here has nothing to compare
                groups[_key(r)].append(r)
    shared = sorted(set(b_groups) & set(n_groups))
    return Comparison(
        changes=[_change(k, b_groups[k], n_groups[k], threshold) for k in shared],
        only_base=sorted(set(b_groups) - set(n_groups)),
        only_new=sorted(set(n_groups) - set(b_groups)), threshold=threshold)


def _case(key: tuple) -> str:
    workload, method, device, workers, batch, profile, options, threads, epochs, seed = key
    text = f"{workload}/{method} {device} w={workers}x{threads} bs={batch} {profile} e={epochs}"
    text += "" if seed == 0 else f" seed={seed}"
    return text + ("" if options == "-" else f" {options}")


def format_comparison(cmp: Comparison) -> str:
    header = ("case", "base", "new", "throughput new/base (95% CI)", "p", "samples",
              "quality delta", "parity base->new", "verdict")
    rows = [header]
    for c in cmp.changes:
        ratio = "-" if c.ratio is None else f"{c.ratio:.3f}x" + (
            f" ({c.ratio_ci[0]:.3f}-{c.ratio_ci[1]:.3f})" if c.ratio_ci else "")
        rows.append((_case(c.key), c.base_status, c.new_status, ratio,
                     "-" if c.p_value is None else p_text(c.p_value).removeprefix("p="),
                     c.samples or "-",
                     "-" if c.quality_delta is None else f"{c.quality_delta:+.4f}",
                     f"{c.base_parity}->{c.new_parity}", c.verdict))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    lines = ["  ".join([*(v.ljust(w) for v, w in zip(r[:-1], widths, strict=True)), r[-1]])
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  -------")
    for label, keys in (("only in BASE", cmp.only_base), ("only in NEW", cmp.only_new)):
        if keys:
            lines.append(f"{label}: {'; '.join(_case(k) for k in keys)}")
    bad = [c for c in cmp.changes if c.regressed]
    lines.append(
        f"\n{len(bad)} regression(s) among {len(cmp.changes)} matched case(s) (threshold "
        f"{cmp.threshold:.0%}, significance p < {ALPHA})" if bad else
        f"\nno regression among {len(cmp.changes)} matched case(s) (threshold "
        f"{cmp.threshold:.0%}, significance p < {ALPHA})")
    return "\n".join(lines)
