"""The benchmark face of the planner: its cases, the smoke selection of plain ``pytest`` and
the cuda selection of a GPU job.

Usage::

    for case in smoke_cases(bench_cases()):        # one case per (method, device)
        case.id, case.markers, case.config(profile="tiny")
    picked = cuda_selection(bench_cases())         # one cuda case per family: id -> BenchRun
    run = picked["vgg11-ddp-cuda-w1"]              # profile "full", options {"precision": "bf16"}
    run.config(case)                               # the RunConfig the benchmark runs
    selection_estimate_s(bench_cases(), picked)    # id -> guessed seconds on one H200

The cases come from :mod:`parabench.sweep.plan` (the one planner); each is run by
:class:`parabench.case.lifecycle.StartedCase`. The asv suite imports this module by name: a
parabench without it is an old commit, whose benchmarks show as n/a.

**The cuda selection** (what ``pytest -m cuda --benchmark-only`` measures unless asked for
every case, tests/benchmarks/conftest.py): each method with a cuda case is a family
(:func:`method_family`: methods that share a forest kernel are one), which gets one case: on
the first workload in :data:`GPU_WORKLOADS` it can run (the convolutional methods on ``vgg11``,
the tensor-parallel ones on ``gpt2``; ``gpt`` while ``gpt2`` is not registered) at
:data:`GPU_PROFILE`, else on the heaviest it trains (the forests, TensorFlow's ``cnn``) at
:data:`OTHER_PROFILE`; in bf16 where the method takes ``precision``; at the fewest workers it
runs at (1: one GPU, unless the method needs more, and the case is then ``multigpu``). Whether
it can run is :func:`runnable`. A selected case trains one warm-up epoch where its windows are
steps (they are calibrated from it) and none where a window is itself an epoch, a fit or a
round; its timed rounds take about :data:`SELECTION_ROUND_BUDGET_S`.

**The estimate** (:func:`selection_estimate_s`): per case its method's declared start-up
(``Method.startup_guess_s``) plus :data:`CUDA_START_S`, and the workload's guessed seconds on
one H200 (:data:`GPU_GUESS`: making the data, or loading it from the session's sweep folder
after the first case; an epoch; an evaluation), with the warm-up, the rounds and the baseline
runs its ratios need; the figures and what they rest on are in docs/cuda-selection.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from parabench import hardware
from parabench.analysis.ratios import CaseKey, baseline_keys
from parabench.case.windows import WINDOW_TARGET_S
from parabench.config import RunConfig
from parabench.identity import BASELINE_METHOD as BASELINE
from parabench.registry import methods, workloads
from parabench.stopping import Epochs
from parabench.sweep.dryrun import FALLBACK_STARTUP_S
from parabench.sweep.plan import BenchCase, Grid, bench_cases

__all__ = ["BASELINE", "BenchCase", "BenchRun", "bench_cases", "cuda_selection", "kept_cases",
           "selection_estimate_s", "smoke_cases", "timed_rounds"]

#: timed rounds (windows) per case: fewer, down to MIN_ROUNDS, when a window is slow, so the
#: rounds take about a BenchRun's ``round_budget_s``; a baseline a ratio needs that no case
#: timed is measured from BASELINE_WINDOWS windows (tests/benchmarks/test_methods.py)
ROUNDS = 10
MIN_ROUNDS = 5
ROUND_BUDGET_S = 30.0
BASELINE_WINDOWS = 3

#: the GPU-sized workloads, first choice first: a cuda-selected case is on the first of these
#: its method can train, at GPU_PROFILE (``gpt`` stands in while ``gpt2`` is not registered)
GPU_WORKLOADS: tuple[str, ...] = ("vgg11", "gpt2", "gpt")
GPU_PROFILE = "full"
#: the profile of a selected case on any other workload: a full random_forest fit takes
#: minutes, and a selected case fits 6 times (the warm-up window, the rounds)
OTHER_PROFILE = "quick"
#: what a selected case trains in where its method reads ``precision`` (a GPU's tensor cores)
GPU_PRECISION = "bf16"
#: a selected case's rounds take about this long: 10 windows of 0.5 s, or MIN_ROUNDS epochs
SELECTION_ROUND_BUDGET_S = 10.0


def smoke_cases(cases: list[BenchCase]) -> list[BenchCase]:
    """One case per (method, device): its cheapest workload at its largest worker count.

    Plain ``pytest`` runs benchmarks once, untimed, to prove they work; running every
    workload under every method there would take longer than the rest of the suite. Serial
    trains every workload in the workload tests; measuring runs keep every case.
    """
    def rank(c: BenchCase) -> tuple:  # the workloads' declared smoke_rank, cheapest first
        order = workloads.get(c.workload).smoke_rank if c.workload in workloads else None
        return (order is None, order or 0, c.workload, -c.workers)

    chosen: dict[tuple[str, str], BenchCase] = {}
    for case in sorted(cases, key=rank):
        chosen.setdefault((case.method, case.device), case)
    return [c for c in cases if chosen.get((c.method, c.device)) is c]


def timed_rounds(window_s: float, budget_s: float = ROUND_BUDGET_S) -> int:
    """Timed rounds of a case whose (warm-up) window took ``window_s``."""
    return max(MIN_ROUNDS, min(ROUNDS, int(budget_s / max(window_s, 1e-9))))


@dataclass(frozen=True, kw_only=True)
class BenchRun:
    """How a benchmark case runs: its profile and options, the epochs it trains before the
    warm-up window (untimed; a window of steps is calibrated from the last one), and about
    how long its timed rounds may take (:func:`timed_rounds`)."""

    profile: str
    options: Mapping[str, Any] = field(default_factory=dict)
    warmup_epochs: int = 1
    round_budget_s: float = ROUND_BUDGET_S

    def config(self, case: BenchCase) -> RunConfig:
        """One epoch per call of the lifecycle's ``step``, as :meth:`BenchCase.config`."""
        return Grid(profile=self.profile, stop=Epochs(1)).config(
            workload=case.workload, method=case.method, device=case.device,
            workers=case.workers, options=dict(self.options))


def method_family(name: str) -> str:
    """The family a method stands for in the cuda selection: the kernel class it declares
    (the forest's torch kernel under its thread and dask schedulers), else itself."""
    kernel = getattr(type(methods.get(name)), "kernel", None)
    return f"kernel {kernel.__qualname__}" if isinstance(kernel, type) else name


def window_unit(case: BenchCase, run: BenchRun) -> str:
    """The ``window_unit`` of a :func:`runnable` case's session (made, not started: cheap)."""
    method, workload = methods.get(case.method), workloads.get(case.workload)
    return type(method.session(workload, run.config(case))).window_unit


def runnable(case: BenchCase, run: BenchRun) -> bool:
    """Whether ``case`` can run on a machine with its hardware: the method's check of it at
    tiny, on the CPU where the method runs there (so no reason hides behind "no GPU here");
    the one reason it may give is the last of :meth:`~parabench.method.Method.check`, a
    missing engine or device, which the case states when it skips."""
    method, workload = methods.get(case.method), workloads.get(case.workload)
    device = "cpu" if "cpu" in method.devices_for(workload) else case.device
    config = replace(run, profile="tiny").config(case._replace(device=device))
    reason = method.check(workload, config)
    return reason is None or reason == (method.unavailable(device)
                                        or hardware.missing(workload.requires))


def selected_run(case: BenchCase) -> BenchRun:
    """The BenchRun of ``case`` in the cuda selection (see the module doc): bf16 where the
    method reads ``precision`` and its check takes it (TensorFlow's refuses torch options);
    no warm-up epoch where a window is itself an epoch (a fit, a round: the warm-up window
    warms up as much), one where windows of steps are calibrated from it."""
    profile = GPU_PROFILE if case.workload in GPU_WORKLOADS else OTHER_PROFILE
    run = BenchRun(profile=profile, round_budget_s=SELECTION_ROUND_BUDGET_S)
    spec = methods.get(case.method).options.get("precision")
    if spec is not None and GPU_PRECISION in (spec.choices or ()):
        bf16 = replace(run, options={"precision": GPU_PRECISION})
        run = bf16 if runnable(case, bf16) or not runnable(case, run) else run
    if not runnable(case, run):
        return run  # it skips with its reason: nothing to warm up
    return replace(run, warmup_epochs=int(window_unit(case, run) == "steps"))


def _preference(case: BenchCase) -> tuple:
    """GPU_WORKLOADS in order, then the heaviest (highest smoke_rank) first; then the fewest
    workers, the method quickest to start."""
    if case.workload in GPU_WORKLOADS:
        where: tuple = (0, GPU_WORKLOADS.index(case.workload), "")
    else:
        rank = workloads.get(case.workload).smoke_rank
        where = (1, -(rank if rank is not None else -1), case.workload)
    start = methods.get(case.method).startup_guess_s
    return (*where, case.workers, FALLBACK_STARTUP_S if start is None else start, case.method)


def cuda_selection(cases: Iterable[BenchCase]) -> dict[str, BenchRun]:
    """One cuda case per method family (:func:`method_family`) at a GPU-meaningful size: its
    id -> how it runs, in ``cases``' order. A family none of whose cases is :func:`runnable`
    keeps its first preferred one, which then skips with its reason."""
    cases = list(cases)
    families: dict[str, list[BenchCase]] = {}
    for case in cases:
        if case.device == "cuda":
            families.setdefault(method_family(case.method), []).append(case)
    picked: dict[str, BenchRun] = {}
    for candidates in families.values():
        ordered = sorted(candidates, key=_preference)
        chosen = next((c for c in ordered if runnable(c, selected_run(c))), ordered[0])
        picked[chosen.id] = selected_run(chosen)
    return {c.id: picked[c.id] for c in cases if c.id in picked}


def kept_cases(cases: Iterable[BenchCase], *, smoke: bool,
               every_cuda: bool = False) -> dict[str, BenchRun | None]:
    """The cases a benchmark session runs: id -> its BenchRun where the cuda selection picked
    it, None where it runs at the session's profile. Smoke mode: :func:`smoke_cases`.
    Measuring: every cpu case, and the cuda selection, or every cuda case with
    ``every_cuda``."""
    cases = list(cases)
    if smoke:
        return dict.fromkeys(c.id for c in smoke_cases(cases))
    cuda = [c for c in cases if c.device == "cuda"]
    picked: Mapping[str, BenchRun] = {} if every_cuda else cuda_selection(cuda)
    return {c.id: picked.get(c.id) for c in cases
            if c.device != "cuda" or every_cuda or c.id in picked}


@dataclass(frozen=True, kw_only=True)
class GpuGuess:
    """Seconds a workload takes at a profile on one H200, serial (docs/cuda-selection.md)."""

    build_s: float  # data made (the session's first case of it) and the model, on the GPU
    load_s: float  # the same when the data was made by an earlier case (the sweep folder)
    epoch_s: float  # one epoch (one fit): a warm-up epoch, a window of epoch unit
    eval_s: float  # the held-out evaluation


#: (workload, profile) -> its guess on one H200; FALLBACK_GUESS where unlisted
GPU_GUESS: dict[tuple[str, str], GpuGuess] = {
    ("vgg11", "full"): GpuGuess(build_s=50.0, load_s=8.0, epoch_s=5.0, eval_s=2.0),
    ("gpt2", "full"): GpuGuess(build_s=8.0, load_s=5.0, epoch_s=15.0, eval_s=3.0),
    ("gpt", "full"): GpuGuess(build_s=5.0, load_s=3.0, epoch_s=6.0, eval_s=1.0),
    ("cnn", "quick"): GpuGuess(build_s=2.0, load_s=1.0, epoch_s=3.0, eval_s=1.0),
    ("random_forest", "quick"): GpuGuess(build_s=2.0, load_s=1.0, epoch_s=3.0, eval_s=0.5),
}
FALLBACK_GUESS = GpuGuess(build_s=10.0, load_s=10.0, epoch_s=10.0, eval_s=2.0)
#: CUDA context and kernels' first load, beyond a method's CPU start-up (Method.startup_guess_s)
CUDA_START_S = 3.0


@dataclass
class _Session:
    """What a pytest session has measured and built so far (baselines, data)."""

    timed: set[CaseKey] = field(default_factory=set)
    built: set[tuple[str, str]] = field(default_factory=set)

    def run_s(self, case: BenchCase, run: BenchRun, windows: int | None = None) -> float:
        """Guessed seconds of one started case: start-up, warm-up epochs and window,
        ``windows`` windows (None: :func:`timed_rounds`'s), one evaluation."""
        guess = GPU_GUESS.get((case.workload, run.profile), FALLBACK_GUESS)
        data = (case.workload, run.profile)
        made = guess.load_s if data in self.built else guess.build_s
        self.built.add(data)
        declared = methods.get(case.method).startup_guess_s
        start = (FALLBACK_STARTUP_S if declared is None else declared) + CUDA_START_S + made
        window = WINDOW_TARGET_S if window_unit(case, run) == "steps" else guess.epoch_s
        rounds = timed_rounds(window, run.round_budget_s) if windows is None else windows
        return (start + run.warmup_epochs * guess.epoch_s + (1 + rounds) * window
                + guess.eval_s)

    def case_s(self, case: BenchCase, run: BenchRun) -> float:
        """``case`` in test_methods.py: its run, and the baseline runs its ratios need that
        no earlier case measured. One that cannot run on the case's device fails at once."""
        seconds = self.run_s(case, run)
        key = run.config(case).key().group
        self.timed.add(key)
        for base in baseline_keys(key):
            if base in self.timed:
                continue
            self.timed.add(base)
            base_case = case._replace(method=base.method, workers=1)
            if case.device in methods.get(base.method).devices_for(workloads.get(case.workload)):
                base_run = replace(run, warmup_epochs=1)  # _baseline's StartedCase's default
                seconds += self.run_s(base_case, base_run, BASELINE_WINDOWS)
        return seconds


def gpus_used(case: BenchCase, run: BenchRun) -> int:
    """GPUs a cuda case takes: one per worker, or per stage where a method declares more
    stages than workers (model_parallel: one process, a GPU per stage)."""
    if "stages" not in methods.get(case.method).options:
        return case.workers
    return max(case.workers, run.config(case).option("stages") or 1)


def selection_estimate_s(cases: Iterable[BenchCase], picked: Mapping[str, BenchRun],
                         gpus: int = 1,
                         engines: Iterable[str] | None = None) -> dict[str, float]:
    """Guessed seconds of each picked case (in ``cases``' order) on ``gpus`` H200s where the
    requirements ``engines`` are installed (None: every one, an upper bound). A case that
    needs more GPUs (:func:`gpus_used`) or a missing engine, or is not :func:`runnable`,
    skips in no time."""
    installed = set(hardware.REQUIREMENTS) if engines is None else set(engines) | {"cuda"}
    installed.discard("multigpu")  # the GPUs a case takes are counted instead
    session, out = _Session(), {}
    for case in cases:
        if case.id not in picked:
            continue
        run = picked[case.id]
        needs = (set(methods.get(case.method).requires)
                 | set(workloads.get(case.workload).requires)) - {"multigpu"}
        runs = needs <= installed and gpus_used(case, run) <= gpus and runnable(case, run)
        out[case.id] = session.case_s(case, run) if runs else 0.0
    return out
