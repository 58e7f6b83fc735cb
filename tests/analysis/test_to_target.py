"""The answer by time-to-target on crafted results: derived for methods that train like
serial, measured for the others, the budget, and serial when the difference is noise."""

from __future__ import annotations

import math

import pytest

from parabench.analysis.recommend import describe, recommend, times_to_target
from parabench.analysis.summary import summarize
from parabench.analysis.time_to_target import BUDGET
from parabench.case.result import QualityValue, Result
from parabench.sweep.table import format_table

pytestmark = pytest.mark.cpu

TRAJECTORY = {"status": "ok", "kind": "exact", "basis": "trajectory", "trajectory_ok": True,
              "loss_rel_max": 1e-7, "weight_rel_l2": 1e-7,
              "tolerance": {"loss_rel": 1e-4, "weight_rel_l2": 1e-4}, "baseline": "serial/cpu"}
STATISTICAL = {"status": "ok", "kind": "statistical", "basis": "quality", "gap": -0.01,
               "tolerance": 0.05, "baseline": "serial/cpu"}
BROKEN = {**TRAJECTORY, "status": "failed", "trajectory_ok": False, "loss_rel_max": 3e-2,
          "weight_rel_l2": 2e-2}


def result(method: str, workers: int, rate: float, samples: int | None, *,
           parity: dict | None = None, repeat: int = 0, threads: int | None = None,
           jitter: float = 0.01, epochs_run: int = 3) -> Result:
    """One run: 8 speed windows of 1,000 samples around ``rate``; ``samples`` to the target
    (None: not reached in ``epochs_run`` epochs)."""
    windows = [1000 / (rate * (1 + jitter * math.sin(i + repeat))) for i in range(8)]
    par = {"status": "not-applicable", "kind": "baseline"} if method == "serial" else parity
    ttt = {"target": 0.9, "reached": samples is not None, "samples_to_target": samples,
           "train_s": samples / rate if samples else None, "startup_s": 2.0,
           "epochs_run": epochs_run, "max_epochs": 10,
           "reason": "" if samples else f"not reached in {epochs_run} epochs"}
    return Result(workload="cnn", method=method, device="cpu", workers=workers,
                  threads_per_worker=threads or max(1, 2 // workers), batch_size=64,
                  epochs=epochs_run, profile="tiny", seed=0, repeat=repeat, status="ok",
                  epoch_s=[1.0] * epochs_run, samples_per_epoch=1024, samples_per_s=rate,
                  window_s=windows, window_samples=[1000] * 8, window={"warmup": 1},
                  quality=QualityValue(name="accuracy", value=0.95, higher_is_better=True),
                  parity=par, peak_rss_mb=500.0, time_to_target=ttt)


def test_more_samples_per_second_is_not_sooner_to_the_target() -> None:
    """The README's main job: fedavg has the most samples/s but needs twice serial's samples;
    ddp trains serial's mathematics, so it needs serial's samples (derived, whatever its own
    count); the answer is the soonest, and fedavg says why it is not."""
    results = [result("serial", 1, 2000.0, 1408),
               result("ddp", 2, 1900.0, 1536, parity=TRAJECTORY),
               result("fedavg", 2, 2320.0, 2880, parity=STATISTICAL)]
    times = times_to_target(results)
    serial, ddp, fedavg = (times[next(k for k in times if k[1] == m)]
                           for m in ("serial", "ddp", "fedavg"))
    assert serial.seconds == pytest.approx(1408 / 2000) and serial.how == "measured"
    assert ddp.how == "derived" and ddp.samples == 1408 and ddp.seconds == pytest.approx(
        1408 / 1900)
    assert fedavg.how == "measured" and fedavg.samples == 2880
    assert 2880 > BUDGET * 1408 and "budget" in fedavg.reason and not fedavg.ok
    [rec] = recommend(results)
    assert rec.target_mode and rec.best.method == "serial"
    assert [c.method for c in rec.unreached_faster] == ["fedavg"]
    text = "\n".join(describe(rec))
    assert text.startswith("cnn on cpu (tiny): use serial with 1 worker, 2 threads, batch 64: "
                           "reaches the target in 0.70s of training")
    assert "not recommended (to target): fedavg with 2 workers" in text
    assert "needs 2,880 samples, more than 2x serial's 1,408" in text
    assert "runner-up: ddp with 2 workers" in text and "derived" in text


def test_a_statistical_method_that_gets_there_sooner_is_recommended_with_its_interval() -> None:
    """The other direction: fewer seconds to the target on its own samples wins, measured."""
    results = [result("serial", 1, 2000.0, 1408),
               *(result("fedavg", 2, 4000.0, s, parity=STATISTICAL, repeat=i)
                 for i, s in enumerate((1500, 1600, 1550)))]
    [rec] = recommend(results)
    assert rec.best.method == "fedavg" and rec.best.to_target.how == "measured"
    assert rec.speedup == pytest.approx((1408 / 2000) / (1550 / 4000), rel=0.02)
    lo, hi = rec.speedup_ci
    assert 1.0 < lo < rec.speedup < hi
    text = "\n".join(describe(rec))
    assert "1.82x sooner than serial (95% CI" in text
    assert "measured: 1,550 samples to the target (median of 3 run(s))" in text


def test_within_noise_of_serial_the_simplest_is_recommended_and_a_real_gain_is_not_noise(
) -> None:
    """ddp 2 % faster than serial on one run a side is within the run-to-run prior: serial is
    recommended and ddp named; 1.5x faster is a real gain and ddp is recommended."""
    close = [result("serial", 1, 2000.0, 1408), result("ddp", 2, 2040.0, 1408,
                                                        parity=TRAJECTORY)]
    [rec] = recommend(close)
    assert rec.best.method == "serial" and rec.within_noise.method == "ddp"
    assert "within noise of serial's" in "\n".join(describe(rec))
    far = [result("serial", 1, 2000.0, 1408), result("ddp", 2, 3000.0, 1408,
                                                      parity=TRAJECTORY)]
    [rec] = recommend(far)
    assert rec.best.method == "ddp" and rec.within_noise is None
    assert rec.speedup == pytest.approx(1.5, rel=0.01) and rec.speedup_ci[0] > 1.0


def test_giving_way_to_serial_takes_serial_s_soonest_threads() -> None:
    """seq2seq quick, seed 0 of the regret harness (2026-11-29): ddp 2x1, within noise of
    serial 1x2, gave way to serial 1x2 (31.2 s) although serial 1x1 reached the target sooner
    (25.2 s). The answer is serial at the threads that get there first; where 2 threads are
    the sooner, serial 1x2 as before."""
    ddp = result("ddp", 2, 2345.0, 52716, parity=TRAJECTORY)  # 22.5 s
    one, two = (result("serial", 1, 2300.0, 52716, threads=1),  # 22.9 s
                result("serial", 1, 2150.0, 52716, threads=2))  # 24.5 s: ddp within noise
    [rec] = recommend([two, one, ddp])
    assert rec.within_noise is not None and rec.within_noise.method == "ddp"
    assert (rec.best.method, rec.best.key.threads) == ("serial", 1)
    faster_two = result("serial", 1, 2330.0, 52716, threads=2)
    [rec] = recommend([result("serial", 1, 1600.0, 52716, threads=1), faster_two, ddp])
    assert rec.within_noise is not None and rec.within_noise.method == "ddp"
    assert (rec.best.method, rec.best.key.threads) == ("serial", 2)


def test_failed_or_unreached_configurations_are_never_the_answer() -> None:
    results = [result("serial", 1, 2000.0, 1408),
               result("ddp", 2, 4000.0, 1408, parity=BROKEN),
               result("fedavg", 2, 5000.0, None, parity=STATISTICAL, epochs_run=10)]
    times = times_to_target(results)
    broken = times[next(k for k in times if k[1] == "ddp")]
    assert broken.how == "measured"  # no licence to borrow serial's samples
    unreached = times[next(k for k in times if k[1] == "fedavg")]
    assert unreached.seconds is None and "not reached" in unreached.reason
    [rec] = recommend(results)
    assert rec.best.method == "serial"
    assert [c.method for c in rec.failed_faster] == ["ddp"]
    assert [c.method for c in rec.unreached_faster] == ["fedavg"]


def test_the_table_ranks_and_stars_by_time_to_target() -> None:
    results = [result("serial", 1, 2000.0, 1408),
               result("ddp", 2, 1900.0, 1536, parity=TRAJECTORY),
               result("fedavg", 2, 2320.0, 2880, parity=STATISTICAL)]
    rows = summarize(results)
    assert [r.method for r in rows] == ["serial", "ddp", "fedavg"]
    assert [r.fastest for r in rows] == [True, False, False]
    cells = {r.method: r.extra["to target"] for r in rows}
    times = {k[1]: t for k, t in times_to_target(results).items()}

    def pm(method: str) -> str:  # the interval's larger side, in % of the seconds
        t = times[method]
        pct = 100 * max(t.ci[1] / t.seconds - 1, 1 - t.ci[0] / t.seconds)
        return f"±{pct:.1f}%" if pct < 10 else f"±{pct:.0f}%"

    assert cells["serial"] == f"0.70s {pm('serial')} (1,408 samples, +2.0s start)"
    assert cells["ddp"] == f"0.74s {pm('ddp')} (1,408 samples derived, +2.0s start)"
    assert cells["fedavg"] == f"1.24s {pm('fedavg')} (2,880 samples, +2.0s start) over budget"
    assert pm("serial") != "±0.0%"
    table = format_table(rows)
    flat = " ".join(table.replace("\n  ", " ").split())  # the legend wraps its lines
    assert "derived: serial's samples" in flat and "over budget: more than 2x" in flat
    from parabench.sweep.site.html import _star_note  # the report page says the same

    assert _star_note(rows).startswith("* soonest to the target")
    plain = [r.__class__.from_dict({**r.to_dict(), "time_to_target": None}) for r in results]
    assert _star_note(summarize(plain)).startswith("* fastest configuration")


def test_without_the_mode_the_answer_is_by_samples_per_second() -> None:
    results = [result("serial", 1, 2000.0, None), result("ddp", 2, 3000.0, None,
                                                         parity=TRAJECTORY)]
    plain = [r.__class__.from_dict({**r.to_dict(), "time_to_target": None}) for r in results]
    [rec] = recommend(plain)
    assert not rec.target_mode and rec.best.method == "ddp"
    assert "serial's throughput" in describe(rec)[0]


def test_tensorflow_methods_derive_from_tf_serial_samples_not_serial() -> None:
    """In one scope (the default run's mlp) torch serial and the Keras twin reach the target
    after different samples: tf_multiworker, which computes tf_serial's mathematics, derives
    from tf_serial's, and serial's own figure is not moved by the twin's."""
    def renamed(r: Result, method: str) -> Result:
        return Result.from_dict({**r.to_dict(), "method": method})

    results = [result("serial", 1, 2000.0, 1408),
               renamed(result("serial", 1, 1000.0, 4096), "tf_serial"),
               renamed(result("ddp", 2, 900.0, 5000, parity=TRAJECTORY), "tf_multiworker"),
               result("ddp", 2, 1900.0, 1536, parity=TRAJECTORY)]
    times = times_to_target(results)
    by = {k[1]: t for k, t in times.items()}
    assert by["serial"].samples == 1408 and by["ddp"].samples == 1408
    assert by["tf_serial"].samples == 4096
    assert by["tf_multiworker"].how == "derived" and by["tf_multiworker"].samples == 4096


def test_the_start_up_shown_is_a_fresh_process_s_with_the_imports_a_server_did() -> None:
    """A case forked from a pre-started interpreter (core.prestart) has no imports in its
    start-up; the user's own run pays them, so the answer adds them back."""
    import dataclasses

    from parabench.core.records import Facts

    plain = result("serial", 1, 2000.0, 1408)
    forked = dataclasses.replace(plain, facts=Facts(prestart_import_s=2.5), time_to_target={
        **plain.time_to_target.to_dict(), "startup_s": 0.1})
    for r, shown in ((plain, "start-up 2.0s apart"), (forked, "start-up 2.6s apart")):
        [rec] = recommend([r])
        assert shown in "\n".join(describe(rec)), (shown, describe(rec))
