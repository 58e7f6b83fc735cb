"""TensorBoard event files load with TensorBoard's own reader and hold the case's figures."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from parabench.sweep.tensorboard import TensorBoardLog, run_name
from sweepdata import case

pytestmark = pytest.mark.cpu


def _accumulator(run_dir: Path):
    pytest.importorskip("tensorboard")
    # TensorBoard's documented switch to its TF-free stub: otherwise its reader imports the
    # whole of TensorFlow when that is installed (tens of seconds, nothing gained)
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("notf"))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir))
    acc.Reload()
    return acc


def test_a_case_becomes_one_run_that_tensorboard_reads_back(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    result = case("cnn", "ddp", 2, epochs=4)
    run_dir = TensorBoardLog(tmp_path).write(result)
    assert run_dir == tmp_path / "cnn" / run_name(result)
    acc = _accumulator(run_dir)
    tags = set(acc.Tags()["scalars"])
    assert {"loss", "epoch_s", "throughput", "quality/final", "peak_rss_mb", "samples_per_s",
            "components/forward", "components/communication"} <= tags
    loss = acc.Scalars("loss")
    assert [e.step for e in loss] == [1, 2, 3, 4]
    assert [e.value for e in loss] == pytest.approx(result.loss, rel=1e-6)
    assert acc.Scalars("peak_rss_mb")[0].value == pytest.approx(result.peak_rss_mb)
    throughput = [e.value for e in acc.Scalars("throughput")]
    assert throughput[1] == pytest.approx(result.samples_per_epoch / result.epoch_s[1], rel=1e-5)


def test_per_epoch_quality_is_logged_when_recorded(tmp_path: Path) -> None:
    import dataclasses

    result = case("cnn", "serial", 1, epochs=3)
    if "epoch_quality" not in {f.name for f in dataclasses.fields(result)}:
        pytest.skip("results do not record per-epoch quality in this tree")
    result = dataclasses.replace(result, epoch_quality=[0.5, None, 0.9])
    acc = _accumulator(TensorBoardLog(tmp_path).write(result))
    assert [(e.step, round(e.value, 3)) for e in acc.Scalars("quality")] == [(1, 0.5), (3, 0.9)]


def test_without_tensorboard_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import fails as if absent
    monkeypatch.setitem(sys.modules, "tensorboard.compat.proto", None)
    with pytest.raises(ImportError, match=r"pip install 'parabench\[tensorboard\]'"):
        TensorBoardLog("unused")
