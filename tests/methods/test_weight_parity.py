"""The weight yardstick of the exact-parity tests passes reduction-order drift, fails bugs."""

from __future__ import annotations

import pytest

from weight_parity import REL_L2, REL_MAX, assert_same_weights

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cpu, pytest.mark.torch]


def _serial() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(64, 288, generator=gen) * 0.03
    weight[0, 0] = 1e-6  # a weight near zero: element-wise rtol cannot judge it
    return {"2.weight": weight, "2.bias": torch.randn(64, generator=gen) * 0.03,
            "bn.num_batches_tracked": torch.tensor(15)}


def _perturbed(relative: float, where: str = "all") -> dict[str, torch.Tensor]:
    weights = {k: v.clone() for k, v in _serial().items()}
    w = weights["2.weight"]
    if where == "all":  # spread over the tensor, as gradient drift is
        noise = torch.randn(w.shape, generator=torch.Generator().manual_seed(1))
        w += noise * (relative * float(w.norm()) / float(noise.norm()))
    else:  # one weight, the near-zero one
        w[0, 0] += relative * float(w.abs().max())
    return weights


def test_the_hybrid_drift_that_failed_elementwise_tolerance_passes() -> None:
    # cnn hybrid 2x2: 12 of 18,432 weights off by up to 2.8e-5 (3.8e-4 of max|w| = 7.35e-2)
    assert_same_weights(_perturbed(3.8e-4, where="one"), _serial(), "hybrid")
    assert_same_weights(_perturbed(3.6e-5), _serial(), "hybrid")


@pytest.mark.parametrize("relative", [1e-3, 6.3e-3, 1.0])
def test_a_gradient_bug_of_1e_3_and_up_fails(relative: float) -> None:
    with pytest.raises(AssertionError, match="more than float32 reduction order"):
        assert_same_weights(_perturbed(relative), _serial(), "broken")


def test_one_weight_far_off_fails_even_when_the_tensor_norm_hardly_moves() -> None:
    assert REL_MAX < 1e-2
    with pytest.raises(AssertionError, match=r"2\.weight"):
        assert_same_weights(_perturbed(1e-2, where="one"), _serial(), "broken")


def test_integer_buffers_must_match_exactly() -> None:
    weights = _serial() | {"bn.num_batches_tracked": torch.tensor(16)}
    with pytest.raises(AssertionError, match="num_batches_tracked"):
        assert_same_weights(weights, _serial(), "broken")


def test_the_bounds_sit_between_measured_drift_and_bugs() -> None:
    assert 10 * 3.6e-5 <= REL_L2 <= 6.3e-3 / 10  # worst drift, smallest bug (module docstring)
