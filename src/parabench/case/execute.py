"""Run one case in *this* process: the body of a runner's isolated worker.

Usage::

    result = execute(config, progress=print)      # never raises for a failing case

The runner starts ``python -m parabench.case.execute CONFIG_JSON RESULT_PATH`` in its own process
group and reads RESULT_PATH afterwards; see :mod:`parabench.sweep.run`. Whatever happens, the
result keeps everything measured before the failure (start-up, finished epochs).

The case runs through its one lifecycle (:class:`~parabench.case.lifecycle.CaseLifecycle`:
start, epochs, evaluate, close); this module turns what it measured into a
:class:`~parabench.case.result.Result`. Around each epoch the lifecycle reads the energy
counters (:mod:`parabench.case.energy`), outside the epoch clock. With
``config.target_quality`` set, the epochs are trained in parts, each followed by a held-out
evaluation, also off that clock, and training stops once the target is reached
(:mod:`parabench.case.stopping`). Under
``torchrun`` every rank runs this with ``launcher=TorchrunLauncher()``
(:mod:`parabench.cli.torchrun`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from parabench.case.bootstrap import median_ci
from parabench.case.energy import EnergyMeter, open_meter
from parabench.case.lifecycle import CaseLifecycle
from parabench.case.result import QualityValue, Result
from parabench.case.stopping import tracker_for
from parabench.case.tracker import TargetTracker
from parabench.case.windows import CI_TARGET, window_target_s
from parabench.config import ConfigError, RunConfig
from parabench.core import rankfork
from parabench.core.clock import WALL, Stopwatch, wall_part
from parabench.core.launcher import POOL, Launcher
from parabench.core.measure import self_max_rss_mb
from parabench.core.records import Energy, Evidence, Facts, Machine, TimeToTarget, Trace, Window
from parabench.method import EpochStats, Session
from parabench.registry import methods, workloads
from parabench.workloads.version import workload_version

#: the runner's host clock (:func:`~parabench.core.clock.now`) when it started the case:
#: the case's ``launch`` part (process start and imports) is measured from it
SPAWNED_ENV = "PARABENCH_SPAWNED_AT"


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    # torch.OutOfMemoryError (CUDA) without importing torch here
    if type(exc).__name__ in {"OutOfMemoryError", "OutOfMemoryException"}:
        return True
    # torch's CPU allocator raises a RuntimeError when malloc fails
    return isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)


def skipped(config: RunConfig, reason: str) -> Result:
    return Result(**_identity(config), status="skipped", reason=reason)


def _identity(config: RunConfig) -> dict[str, Any]:
    return {
        "workload": config.workload,
        "method": config.method,
        "device": config.device,
        "workers": config.workers,
        "threads_per_worker": config.threads,
        "batch_size": config.batch_size,
        "epochs": config.epochs,
        "profile": config.profile,
        "seed": config.seed,
        "repeat": config.repeat,
        "config": config.to_dict(),
        "workload_version": _workload_version(config.workload),
    }


def _workload_version(name: str) -> str | None:
    """The version of the registered workload ``name`` (None: not registered, or its code
    cannot be read: an unknown version, compared as before)."""
    try:
        return workload_version(workloads.get(name))
    except Exception:  # noqa: BLE001 - not registered, or unreadable: compared as before
        return None


def execute(config: RunConfig, progress: Callable[[str], None] | None = None, *,
            launcher: Launcher = POOL, launch_s: float | None = None) -> Result:
    """The case's lifecycle (:mod:`parabench.case.lifecycle`) run to a Result, its wall
    time split by part (``wall_parts``, :func:`wall_split`; ``launch_s``: the seconds from the
    runner's start of this process to here, if known)."""
    say = progress or (lambda _msg: None)
    WALL.reset()
    workload = workloads.get(config.workload)
    method = methods.get(config.method)
    lifecycle = CaseLifecycle(config=config, workload=workload, method=method,
                              launcher=launcher)
    with wall_part("check"):
        reason = lifecycle.reason()
    if reason is not None:
        return skipped(config, reason)

    m: dict[str, Any] = {"status": "ok", "reason": ""}
    lifecycle.meter = meter = open_meter(config)
    tracker = tracker_for(workload, config)  # None unless --target-quality
    try:
        say("starting")
        if tracker is not None:
            say(f"target {tracker.target:g}: {tracker.source}")
        with wall_part("start"):
            lifecycle.start()
        m["startup_s"] = lifecycle.startup_s
        with wall_part("train"):
            m["cpu_efficiency"] = lifecycle.train(config.epochs, tracker, say)
        with wall_part("evaluate"):
            value, m["eval_s"] = lifecycle.final_quality(tracker, say)
        m["quality"] = QualityValue(
            name=workload.quality.name,
            value=value,
            higher_is_better=workload.quality.higher_is_better,
        )
        with wall_part("windows"):
            lifecycle.measure_windows(say)  # speed, after the quality: see case.lifecycle
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a result
        if isinstance(exc, KeyboardInterrupt):
            raise
        m["status"] = "oom" if is_oom(exc) else "failed"
        if isinstance(exc, ConfigError):  # bad input (e.g. a malformed --data-dir): usage
            m["config_error"] = True
        m["reason"] = f"{type(exc).__name__}: {exc}".strip()
        if m["status"] == "oom":
            m["reason"] += " (try a smaller --batch-size, or more workers/devices)"
        m["traceback"] = traceback.format_exc(limit=8)
    finally:
        with wall_part("close"):
            lifecycle.close()
            meter.close()
    m.update(_epochs(lifecycle.history))  # every finished epoch, also when a later one failed
    m.update(_windows(lifecycle))
    # the loaders' own counts and the windows' span, for the checks at the file (case.audit)
    m["evidence"] = Evidence(window_served=[s.served for s in lifecycle.windows],
                             eval_served=list(lifecycle.eval_served),
                             windows_span=lifecycle.windows_span,
                             window_spans=lifecycle.window_spans)
    result = _finish(config, lifecycle.session, m, meter, tracker)
    if launcher is POOL:  # torchrun's ranks would all measure one GPU at once: no peak
        with wall_part("peak"):
            result = with_peak(result, config)
    return dataclasses.replace(result, wall_parts=wall_split(WALL.seconds(), lifecycle,
                                                             tracker, launch_s))


def wall_split(parts: dict[str, float], lifecycle: CaseLifecycle,
               tracker: TargetTracker | None, launch_s: float | None) -> dict[str, float]:
    """The case's wall-time parts (``Result.wall_parts``): ``parts`` as :data:`WALL` timed
    them, with training and the speed windows split by the case's clock into what it timed
    (``train``: the epochs; ``windows``: every speed window trained only to be timed) and the
    rest: the evaluations between parts (``evaluate``, the tracker's own seconds) and
    ``bookkeeping`` (energy reads, the parity trace, progress lines between parts and
    windows)."""
    out = {"launch": launch_s} if launch_s is not None else {}
    out.update(parts)
    evals = sum(tracker.eval_s) if tracker is not None else 0.0
    epochs = sum(s.seconds for s in lifecycle.history)
    # windows that were parts trained for quality are in ``train`` already
    windows = sum(s.seconds for s in lifecycle.windows[lifecycle.windows_from_training:])
    train_wall, windows_wall = out.pop("train", 0.0), out.pop("windows", 0.0)
    out["train"], out["windows"] = epochs, windows
    out["evaluate"] = out.get("evaluate", 0.0) + evals
    out["bookkeeping"] = (train_wall - epochs - evals) + (windows_wall - windows)
    return {name: round(seconds, 4) for name, seconds in out.items()}


def with_peak(result: Result, config: RunConfig) -> Result:
    """``result`` with its machine's matmul peak (the sweep's, or measured now: the case's
    processes are gone) and its MFU (:mod:`parabench.case.peak`); as it is when it has no
    speed or FLOPs, and with ``extra.peak_error`` when the peak could not be measured."""
    if (result.status != "ok" or not result.flops_per_sample or not result.samples_per_s
            or workloads.get(config.workload).family != "torch"):
        return result
    from parabench.case.peak import case_peak, mfu

    try:
        peak = case_peak(config, threads_per_worker=result.threads_per_worker,
                         gpus=result.facts.gpus_used)
    except Exception as exc:  # noqa: BLE001 - the peak is a figure, never the case's fate
        return dataclasses.replace(result, extra={**result.extra,
                                                  "peak_error": f"{type(exc).__name__}: {exc}"})
    return dataclasses.replace(result, machine=Machine(peak=peak), mfu=mfu(
        flops_per_sample=result.flops_per_sample, samples_per_s=result.samples_per_s, peak=peak))


def _epochs(history: list[EpochStats]) -> dict[str, Any]:
    """The result's per-epoch fields from the epochs that finished."""
    components: dict[str, list[float]] = {}
    for stats in history:
        for name, seconds in stats.components.items():
            components.setdefault(name, []).append(seconds)
    return {"epoch_s": [s.seconds for s in history], "loss": [s.loss for s in history],
            "components": components}


def _windows(lifecycle: CaseLifecycle) -> dict[str, Any]:
    """The result's window fields from the windows that finished (none: no fields)."""
    if not lifecycle.windows:
        return {}
    session, steps, asked = lifecycle.session, lifecycle.window_steps, lifecycle.windows_asked()
    return {"window_s": [s.seconds for s in lifecycle.windows],
            "window_cores": lifecycle.window_cores,
            "window_samples": [s.samples for s in lifecycle.windows],
            "window": Window(unit=session.window_unit if session else "epoch", steps=steps,
                             steps_source="--steps" if lifecycle.config.steps else "auto",
                             target_s=window_target_s(), warmup=lifecycle.warmup_windows,
                             # None: windows were added while the CI was wider than this
                             asked=asked, ci_target=None if asked else CI_TARGET,
                             from_training=lifecycle.windows_from_training)}


def _finish(config: RunConfig, session: Session | None, m: dict[str, Any],
            meter: EnergyMeter, tracker: TargetTracker | None) -> Result:
    identity = _identity(config)
    extra: dict[str, Any] = {}
    facts = Facts()
    samples = None
    if session is not None:
        identity["threads_per_worker"] = session.threads_per_worker
        identity["batch_size"] = session.batch_size or config.batch_size
        samples = session.samples_per_epoch or None
        m["flops_per_sample"] = session.flops_per_sample
        # exact parity's evidence, if recorded
        m["trace"] = Trace.from_dict(getattr(session, "trace", None))
        extra.update(session.notes)
        facts = getattr(session, "facts", facts)  # a plugin session may predate facts
        m["peak_gpu_mb"] = _safe(session.peak_gpu_mb)
    m["energy"] = Energy.from_dict(meter.summary(samples))
    if tracker is not None:  # what was reached so far, also when the case failed later
        m["epoch_quality"] = list(tracker.qualities)
        m["time_to_target"] = TimeToTarget.from_dict(
            tracker.summary(m["epoch_s"], m.get("startup_s"), config.epochs))
    if "traceback" in m:
        extra["traceback"] = m.pop("traceback")
    facts = dataclasses.replace(facts, self_max_rss_mb=self_max_rss_mb(),
                                config_error=bool(m.pop("config_error", False)))
    result = Result(
        **identity,
        status=m.pop("status"),
        reason=m.pop("reason"),
        samples_per_epoch=samples,
        extra=extra,
        facts=facts,
        grading=methods.get(config.method).grading(workloads.get(config.workload), config),
        **m,
    )
    if rates := result.window_rates:
        ci = median_ci(rates)
        return dataclasses.replace(result, samples_per_s=statistics.median(rates),
                                   samples_per_s_ci=list(ci) if ci else None)
    if samples and result.median_epoch_s:
        return dataclasses.replace(result, samples_per_s=samples / result.median_epoch_s)
    return result


def _safe(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception:  # noqa: BLE001 - a memory query must not lose the result
        return None


def die_with_runner() -> None:
    """Linux: when the runner dies, take the whole case (this process group) down with it.

    The kernel sends SIGTERM on the parent's death (PR_SET_PDEATHSIG); the handler kills the
    group, so helpers the case started go too. The runner's own timeout uses SIGKILL.
    """
    runner = os.environ.get("PARABENCH_RUNNER_PID")
    if not sys.platform.startswith("linux") or runner is None:
        return
    import ctypes
    import signal

    signal.signal(signal.SIGTERM, lambda *_: os.killpg(0, signal.SIGKILL))
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM))
    if os.getppid() != int(runner):  # the runner died before prctl took effect
        os.killpg(0, signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    """Worker entry: ``python -m parabench.case.execute CONFIG_JSON RESULT_PATH``."""
    die_with_runner()
    config_json, result_path = argv or sys.argv[1:]
    config = RunConfig.from_dict(json.loads(config_json))
    rankfork.start_if_asked(config)  # before anything runs: the copy the ranks fork from
    spawned = os.environ.get(SPAWNED_ENV)  # the runner's host clock when it started us
    launch_s = Stopwatch.since(float(spawned)).seconds() if spawned else None

    def say(msg: str) -> None:
        print(msg, flush=True)

    result = execute(config, progress=say, launch_s=launch_s)
    tmp = Path(result_path + ".tmp")
    tmp.write_text(result.to_json())
    tmp.replace(result_path)  # the runner sees the whole result or none
    return 0


if __name__ == "__main__":
    # run the importable module's main, not this __main__ copy's: plugins and tests that
    # patch parabench.case.execute then patch the code the case really runs
    from parabench.case import execute as _imported

    code = _imported.main()
    sys.stdout.flush()
    sys.stderr.flush()
    # the result is written and the session closed: skip the interpreter's teardown (0.4-0.8 s
    # with torch imported), as a pre-started case does (parabench.core.prestart_server)
    os._exit(code)
