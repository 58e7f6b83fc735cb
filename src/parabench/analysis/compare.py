"""``parabench compare BASE NEW``: did throughput or parity get worse between two results files?

Usage::

    cmp = compare(read_results("base.jsonl"), read_results("new.jsonl"), threshold=0.10)
    print(format_comparison(cmp))
    sys.exit(cmp.exit_code)                        # 1 regression, 3 other machine, else 0
    speed = judge_speed([[1000.0, 1010.0], [990.0, 1004.0]],   # BASE: each run's window rates
                        [[660.0, 668.0], [671.0, 655.0]], threshold=0.10)
    speed.verdict, speed.ratio, speed.estimate.ci       # 'SLOWER 51%', 0.66, (0.59, 0.74)

Cases are matched by identity (workload, method, device, workers, batch, profile, options,
epochs, seed; repeats are pooled; skipped cases are left out) and workload version
(:mod:`parabench.workloads.version`): a case whose workload's code changed between BASE and
NEW trains another model or data, so it is not compared (one line per workload says so; no
regression); an older result, without a version, is compared as before. Each ok result of a
case is one *run* with its steady speed windows; the speed change is NEW/BASE throughput
judged at both levels it varies on (:mod:`parabench.analysis.levels`): between runs (their
own spread, pooled with a prior run-to-run CV, the busy prior for a side measured on a busy
machine) and within a run (its windows). :func:`judge_speed` is that judgement on any rates
grouped by run (an interleaved rerun calls it with its rounds, paired: from 7 rounds on, the
exact sign-flip test on the trimmed mean of the rounds' differences,
:mod:`parabench.analysis.signflip`).

The speed verdict, with ``T`` the threshold and ``r`` NEW/BASE (``p``: the two-level t test, or
the paired rounds' sign-flip test; below 0.05 exactly when the 95 % interval excludes 1):

* ``SLOWER x%`` (a regression): ``r < 1 / (1 + T)`` and ``p < 0.05``; ``faster x%`` the mirror;
* ``within threshold``: ``p < 0.05`` but ``r`` inside the threshold either way;
* ``slower x%? (not significant)`` / ``faster x%? ...``: past the threshold, ``p >= 0.05``;
* ``inconclusive (CI spans the threshold)``: inside it, ``p >= 0.05``, but the interval reaches
  past the threshold (too few runs, or too noisy ones, to say "same");
* ``same (not significant)``: inside the threshold, interval too, and ``p >= 0.05``.

The estimate past the threshold and the interval excluding 1, rather than the whole interval
past the threshold: the latter misses most real slowdowns of 1.5 x the threshold, and the
prior already keeps A/A runs from reading significant (docs/usage.md has the simulated rates).

A pair also *regresses* when parity held in BASE and fails in NEW, or when a case ok in BASE
is failed / timeout / oom in NEW. A side measured busy is said in the verdict (and gets the
busy prior). Runs on different machines (CPU model, cores, GPUs, Python / torch / CUDA
versions, thread settings: ``Result.env`` and ``Result.machine``) get no speed verdict,
``not comparable: other machine (...)``, and exit code 3 unless ``allow_cross_machine``;
parity and status are still judged. Another host name with the same of all those is said
only.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from parabench.analysis.figures import recorded_busy
from parabench.analysis.levels import (
    BUSY_RUN_CV,
    PRIOR_RUNS,
    RUN_CV,
    LevelEstimate,
    level_ratio,
    run_rates,
)
from parabench.analysis.signflip import EXACT_MAX, TRIM
from parabench.analysis.stats import ALPHA, p_text
from parabench.case.result import FAILED_STATUSES, Result
from parabench.identity import CaseId, CaseKey, seed_label
from parabench.workloads.version import versions_differ

EXIT_OK, EXIT_REGRESSED, EXIT_OTHER_MACHINE = 0, 1, 3
#: what a machine is, for comparing speeds: Result.env keys, then Result.machine fields
MACHINE_ENV = ("cpu", "cores", "gpus", "python", "torch", "cuda")
MACHINE_SETTINGS = ("threads", "omp_wait_policy", "torch_intra_op_threads")


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
class Speed:
    """The speed verdict on two sides' runs (:func:`judge_speed`)."""

    estimate: LevelEstimate
    verdict: str

    @property
    def ratio(self) -> float:
        return self.estimate.ratio

    @property
    def regressed(self) -> bool:
        return self.verdict.startswith("SLOWER")


def speed_verdict(ratio: float, p: float, threshold: float,
                  ci: tuple[float, float] | None = None) -> str:
    """The verdict for NEW/BASE ``ratio``, its two-level ``p`` and 95 % interval ``ci``
    (module docstring)."""
    slow_edge, fast_edge = 1 / (1 + threshold), 1 + threshold
    slow, fast = ratio < slow_edge, ratio > fast_edge
    change = f"{1 / ratio - 1:.0%}" if ratio < 1 else f"{ratio - 1:.0%}"
    if p < ALPHA:
        return (f"SLOWER {change}" if slow else f"faster {change}" if fast
                else "within threshold")
    if slow or fast:
        return f"{'slower' if slow else 'faster'} {change}? (not significant)"
    if ci is not None and (ci[0] < slow_edge or ci[1] > fast_edge):
        return "inconclusive (CI spans the threshold)"
    return "same (not significant)"


def judge_speed(base: Sequence[Sequence[float]], new: Sequence[Sequence[float]],
                threshold: float, *, base_busy: bool = False, new_busy: bool = False,
                run_cv: float = RUN_CV, busy_run_cv: float = BUSY_RUN_CV,
                paired: bool = False) -> Speed:
    """Judge NEW against BASE: each holds its runs' steady window rates (samples/s, one
    sequence per run or round). A busy side gets ``busy_run_cv`` as its prior; ``paired``:
    run i of each side ran in round i of an interleaved rerun (level_ratio). ValueError
    when a side has no positive rate."""
    est = level_ratio(base, new, base_run_cv=busy_run_cv if base_busy else run_cv,
                      new_run_cv=busy_run_cv if new_busy else run_cv, paired=paired)
    return Speed(estimate=est, verdict=speed_verdict(est.ratio, est.p, threshold, est.ci))


@dataclass(frozen=True, kw_only=True)
class Change:
    key: tuple
    base_status: str
    new_status: str
    #: NEW throughput / BASE's (< 1 is slower), its 95 % interval and p (two-level t test)
    ratio: float | None = None
    ratio_ci: tuple[float, float] | None = None
    p_value: float | None = None
    #: '2x8 vs 2x8': runs x windows per run, BASE vs NEW
    samples: str = ""
    #: the speed estimate behind ratio / ratio_ci / p_value (None: no speed verdict)
    estimate: LevelEstimate | None = None
    quality_delta: float | None = None
    base_parity: str = "-"
    new_parity: str = "-"
    verdict: str = "same"
    #: busy sides and machine differences, said with the verdict
    notes: tuple[str, ...] = ()
    #: the speeds were measured on different machines (no speed verdict unless allowed)
    other_machine: bool = False

    @property
    def regressed(self) -> bool:
        return self.verdict.startswith(("SLOWER", "PARITY", "BROKEN"))

    @property
    def not_comparable_machine(self) -> bool:
        return self.verdict.startswith("not comparable: other machine")


@dataclass(frozen=True, kw_only=True)
class Comparison:
    changes: list[Change]
    only_base: list[tuple]
    only_new: list[tuple]
    threshold: float
    #: cases not compared because their workload's version changed: key -> (BASE's, NEW's)
    changed: dict[tuple, tuple[str, str]] = field(default_factory=dict)
    run_cv: float = RUN_CV
    busy_run_cv: float = BUSY_RUN_CV

    @property
    def regressed(self) -> bool:
        return any(c.regressed for c in self.changes)

    @property
    def exit_code(self) -> int:
        """1 on a regression; else 3 when a speed was not judged for another machine; else 0."""
        if self.regressed:
            return EXIT_REGRESSED
        if any(c.not_comparable_machine for c in self.changes):
            return EXIT_OTHER_MACHINE
        return EXIT_OK


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


def _shown(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _machine_values(rs: Iterable[Result]) -> dict[str, set[str]]:
    """Each machine fact of ``rs`` (MACHINE_ENV, MACHINE_SETTINGS, host): its known values."""
    out: dict[str, set[str]] = defaultdict(set)
    for r in rs:
        env = r.env or {}
        for name in (*MACHINE_ENV, "host"):
            if env.get(name) is not None:
                out[name].add(_shown(env[name]))
        for name in MACHINE_SETTINGS:
            if r.machine is not None and (value := getattr(r.machine, name)) is not None:
                out[name].add(_shown(value))
    return out


def machine_differences(base: Iterable[Result], new: Iterable[Result]
                        ) -> tuple[list[str], list[str]]:
    """(what makes them other machines, what only differs in name: the host): each as
    'cpu "A" -> "B"'. A fact one side did not record is not a difference."""
    b, n = _machine_values(base), _machine_values(new)
    differ = [f"{name} {' / '.join(sorted(b[name]))} -> {' / '.join(sorted(n[name]))}"
              for name in (*MACHINE_ENV, *MACHINE_SETTINGS)
              if b.get(name) and n.get(name) and b[name] != n[name]]
    host = b.get("host") and n.get("host") and b["host"] != n["host"]
    return differ, ["another host"] if host else []


def _busy_note(side: str, rs: list[Result]) -> str | None:
    busy = sum(recorded_busy(r) for r in rs)
    return f"{side} busy {busy}/{len(rs)} runs" if busy else None


def _change(key: tuple, base: list[Result], new: list[Result], threshold: float, *,
            allow_cross_machine: bool = False, run_cv: float = RUN_CV,
            busy_run_cv: float = BUSY_RUN_CV, paired: bool = False) -> Change:
    b_status, n_status = _status(base), _status(new)
    b_par, n_par = _parity(base), _parity(new)
    common = dict(key=key, base_status=b_status, new_status=n_status, base_parity=b_par,
                  new_parity=n_par)
    if b_status == "ok" and n_status in FAILED_STATUSES:
        return Change(**common, verdict=f"BROKEN: {n_status}")
    if b_status != "ok" or n_status != "ok":
        return Change(**common, verdict="not comparable")
    b_ok = [r for r in base if r.status == "ok"]
    n_ok = [r for r in new if r.status == "ok"]
    b_runs, n_runs = run_rates(b_ok), run_rates(n_ok)
    if not b_runs or not n_runs:
        return Change(**common, verdict="no timings")
    differ, named = machine_differences(b_ok, n_ok)
    b_busy, n_busy = _busy_note("BASE", b_ok), _busy_note("NEW", n_ok)
    busy = [note for note in (b_busy, n_busy) if note]
    # rounds pair only while every round gave each side one ok run, in round order
    pair = paired and (len(b_ok) == len(base) == len(new) == len(n_ok)
                       == len(b_runs) == len(n_runs))
    speed = judge_speed(b_runs, n_runs, threshold, base_busy=bool(b_busy),
                        new_busy=bool(n_busy), run_cv=run_cv, busy_run_cv=busy_run_cv,
                        paired=pair)
    est = speed.estimate
    q_b, q_n = _quality(base), _quality(new)
    notes = (*busy, *(f"other machine: {d}" for d in differ), *named)
    if b_par != "failed" and n_par == "failed":
        verdict = "PARITY FAILED"
    elif differ and not allow_cross_machine:
        verdict = f"not comparable: other machine ({'; '.join(differ)})"
        notes = (*busy, *named)
    else:
        verdict = speed.verdict
    return Change(**common, ratio=est.ratio, ratio_ci=est.ci, p_value=est.p, estimate=est,
                  samples=f"{est.base_runs}x{est.base_windows} vs "
                          f"{est.new_runs}x{est.new_windows}",
                  quality_delta=None if q_b is None or q_n is None else q_n - q_b,
                  verdict=verdict, notes=notes, other_machine=bool(differ))


def compare(base: Iterable[Result], new: Iterable[Result], threshold: float = 0.10, *,
            allow_cross_machine: bool = False, run_cv: float = RUN_CV,
            busy_run_cv: float = BUSY_RUN_CV, paired: bool = False) -> Comparison:
    """Match cases by identity and judge each pair (see the module docstring). ``paired``:
    BASE's and NEW's results of a case are in round order of an interleaved rerun (result i
    of each side ran in round i), so each case's runs are judged paired by round."""
    b_groups: dict[tuple, list[Result]] = defaultdict(list)
    n_groups: dict[tuple, list[Result]] = defaultdict(list)
    for groups, results in ((b_groups, base), (n_groups, new)):
        for r in results:
            if r.status != "skipped":  # a case that cannot run here has nothing to compare
                groups[_key(r)].append(r)
    shared = sorted(set(b_groups) & set(n_groups))
    changed = {k: (_versions(b_groups[k]), _versions(n_groups[k])) for k in shared
               if versions_differ(_recorded(b_groups[k]), _recorded(n_groups[k]))}
    return Comparison(
        changes=[_change(k, b_groups[k], n_groups[k], threshold,
                         allow_cross_machine=allow_cross_machine, run_cv=run_cv,
                         busy_run_cv=busy_run_cv, paired=paired)
                 for k in shared if k not in changed],
        only_base=sorted(set(b_groups) - set(n_groups)),
        only_new=sorted(set(n_groups) - set(b_groups)), threshold=threshold,
        run_cv=run_cv, busy_run_cv=busy_run_cv, changed=changed)


def _recorded(rs: list[Result]) -> list[str | None]:
    return [r.workload_version for r in rs]


def _versions(rs: list[Result]) -> str:
    """The workload versions ``rs`` recorded, as said: 'a1b2c3d4e5f6' (or 'a / b')."""
    return " / ".join(sorted({v for v in _recorded(rs) if v is not None}))


def changed_lines(cmp: Comparison) -> list[str]:
    """One line per workload whose version changed: 'mlp changed since BASE (version a -> b):
    not compared (N cases)'."""
    cases: dict[tuple[str, str, str], int] = defaultdict(int)
    for key, (base, new) in cmp.changed.items():
        cases[(key[0], base, new)] += 1
    return [f"{workload} changed since BASE (version {base} -> {new}): not compared "
            f"({n} case{'s' if n > 1 else ''})"
            for (workload, base, new), n in sorted(cases.items())]


def _case(key: tuple) -> str:
    """A :attr:`~parabench.identity.CaseId.work` key's label: its group's, epochs, seeds."""
    *group, epochs, seed, train_seed = key
    return CaseKey(*group).label() + f" e={epochs}" + seed_label(seed, train_seed)


def _verdict_text(c: Change) -> str:
    return c.verdict + (f" [{'; '.join(c.notes)}]" if c.notes else "")


def format_comparison(cmp: Comparison) -> str:
    header = ("case", "base", "new", "throughput new/base (95% CI)", "p",
              "runs x windows base vs new", "quality delta", "parity base->new", "verdict")
    rows = [header]
    for c in cmp.changes:
        ratio = "-" if c.ratio is None else f"{c.ratio:.3f}x" + (
            f" ({c.ratio_ci[0]:.3f}-{c.ratio_ci[1]:.3f})" if c.ratio_ci else "")
        rows.append((_case(c.key), c.base_status, c.new_status, ratio,
                     "-" if c.p_value is None else p_text(c.p_value).removeprefix("p="),
                     c.samples or "-",
                     "-" if c.quality_delta is None else f"{c.quality_delta:+.4f}",
                     f"{c.base_parity}->{c.new_parity}", _verdict_text(c)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    lines = ["  ".join([*(v.ljust(w) for v, w in zip(r[:-1], widths, strict=True)), r[-1]])
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  -------")
    for label, keys in (("only in BASE", cmp.only_base), ("only in NEW", cmp.only_new)):
        if keys:
            lines.append(f"{label}: {'; '.join(_case(k) for k in keys)}")
    lines.extend(changed_lines(cmp))
    tests = {c.estimate.test for c in cmp.changes if c.estimate}
    if tests - {"t"}:
        lines.append(
            f"\ntest: NEW/BASE of each run's median window rate, paired by round: the "
            f"{TRIM:.0%}-trimmed mean of the rounds' log ratios; p and the 95% interval from "
            f"the sign-flip test on them (every sign assignment, {EXACT_MAX} rounds or fewer), "
            f"no prior; SLOWER / faster: past the threshold and p < {ALPHA}")
    if "t" in tests or not tests:
        lines.append(
            f"\ntest: NEW/BASE of each run's median window rate (geometric mean over runs); "
            f"95% t interval and p from the runs' spread, pooled with a prior run-to-run CV "
            f"of {cmp.run_cv:.0%} ({cmp.busy_run_cv:.0%} for a side measured busy) worth "
            f"{PRIOR_RUNS} runs, and each run's windows (bootstrap); SLOWER / faster: past the"
            f" threshold and p < {ALPHA}")
    for c in cmp.changes:
        if c.estimate and c.estimate.base_runs + c.estimate.new_runs == 2:
            lines.append("one run per side: its run-to-run spread is the prior's (use "
                         "--repeats to measure it)")
            break
    bad = [c for c in cmp.changes if c.regressed]
    other = [c for c in cmp.changes if c.not_comparable_machine]
    lines.append(
        f"\n{len(bad)} regression(s) among {len(cmp.changes)} matched case(s) (threshold "
        f"{cmp.threshold:.0%})" if bad else
        f"\nno regression among {len(cmp.changes)} matched case(s) (threshold "
        f"{cmp.threshold:.0%})")
    if other:
        lines.append(f"{len(other)} case(s) not judged for speed: measured on other machines "
                     "(--allow-cross-machine judges them anyway)")
    return "\n".join(lines)
