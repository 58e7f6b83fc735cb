"""The comparison arithmetic and its one sign convention (parabench.sweep.compare).

Crafted inputs: a change of a formula or of the gap's sign fails here, before any report
shows a figure with the wrong meaning.
"""

from __future__ import annotations

import math

import pytest

from parabench.sweep import compare

pytestmark = pytest.mark.cpu


def test_speedup_is_baseline_time_over_method_time() -> None:
    assert compare.speedup(baseline_s=2.0, method_s=0.5) == 4.0
    assert compare.slowdown(baseline_s=2.0, method_s=0.5) == 0.25
    assert compare.throughput_speedup(method_rate=300.0, baseline_rate=100.0) == 3.0
    assert compare.efficiency(speedup=4.0, workers=8) == 0.5


@pytest.mark.parametrize(("quality", "baseline", "higher", "gap"), [
    (0.90, 0.92, True, -0.02),    # lower accuracy: worse, negative
    (0.95, 0.92, True, 0.03),     # higher accuracy: better, positive
    (0.30, 0.20, False, -0.10),   # higher loss: worse, negative
    (0.10, 0.20, False, 0.10),    # lower loss: better, positive
])
def test_gap_is_negative_when_the_method_is_worse(quality: float, baseline: float,
                                                  higher: bool, gap: float) -> None:
    assert compare.quality_gap(quality, baseline, higher) == pytest.approx(gap)
    assert compare.quality_shortfall(quality, baseline, higher) == pytest.approx(-gap)


def test_equal_quality_gives_positive_zero_both_ways() -> None:
    for higher in (True, False):
        assert math.copysign(1.0, compare.quality_gap(0.5, 0.5, higher)) == 1.0
        assert math.copysign(1.0, compare.quality_shortfall(0.5, 0.5, higher)) == 1.0


def test_parity_tolerance_and_verdict() -> None:
    assert compare.parity_tolerance("exact", 0.9, True, spread=0.5) == compare.EXACT_TOLERANCE
    assert compare.parity_tolerance("exact", 2.0, False, spread=0.5) == pytest.approx(0.03)
    assert compare.parity_tolerance("statistical", 0.9, True, spread=0.01) == pytest.approx(0.03)
    assert compare.parity_tolerance("statistical", 0.9, True, spread=0.0) == 0.01  # the floor
    assert compare.parity_tolerance("statistical", 4.0, False, spread=0.01) == pytest.approx(0.12)
    assert compare.parity_holds(-0.015, 0.015) and compare.parity_holds(0.2, 0.015)
    assert not compare.parity_holds(-0.016, 0.015)


def test_the_baseline_of_a_method() -> None:
    assert compare.baseline_of("ddp") == "serial" and compare.baseline_of("serial") == "serial"
    assert compare.baseline_of("tf_multiworker") == "tf_serial"
    assert compare.is_baseline("serial") and compare.is_baseline("tf_serial")
    assert not compare.is_baseline("ddp") and not compare.is_baseline("tf_mirrored")
    assert compare.baseline_of("not_registered") == "serial"
