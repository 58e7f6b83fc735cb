"""A train seed moves the training's own randomness (the initial weights, each epoch's sample
order, a forest's ``random_state``) and not the data: another sound run of the same data,
what ``parabench calibrate --train-seed-offset`` measures for the paired spread (#41).

Checked on the real builder: the same data bytes under another train seed, initial weights
that follow the train seed (seed 0's data with train seed 7 starts from seed 7's weights), the
same training bit for bit when the train seed is the seed, another one when it is not.
"""

from __future__ import annotations

from typing import Any

import pytest

from parabench.config import ConfigError, RunConfig
from parabench.identity import CaseId
from parabench.registry import methods, workloads

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.cpu, pytest.mark.torch]


def _config(workload: str, **changes: Any) -> RunConfig:
    return RunConfig(workload=workload, method="serial", workers=1, threads_per_worker=1,
                     profile="tiny", epochs=1, **changes)


def _state(session: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in session.loop.model.state_dict().items()}


def _run(**changes: Any) -> dict[str, Any]:
    """cnn tiny serial (its data follows the seed; mlp's is one fixed draw): its training
    tensors, its loop's order seed, the weights before and after one epoch."""
    config = _config("cnn", **changes)
    with methods.get("serial").session(workloads.get("cnn"), config) as session:
        session.start()
        x, start, order_seed = session.loop.x.clone(), _state(session), session.loop.seed
        session.train_epoch(0)
        return {"x": x, "start": start, "end": _state(session), "order_seed": order_seed}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(v, b[k]) for k, v in a.items())


def test_the_train_seed_moves_the_weights_and_the_order_and_not_the_data() -> None:
    own, named, other, seven = _run(), _run(train_seed=0), _run(train_seed=7), _run(seed=7)
    # the data follows the seed alone
    assert torch.equal(own["x"], other["x"]) and not torch.equal(own["x"], seven["x"])
    # train seed = seed: the same run, bit for bit
    assert _same(own["start"], named["start"]) and _same(own["end"], named["end"])
    # another train seed: seed 7's initial weights on seed 0's data, another order
    assert _same(other["start"], seven["start"]) and not _same(other["start"], own["start"])
    assert (own["order_seed"], other["order_seed"]) == (0, 7)
    assert not _same(other["end"], own["end"])


def test_a_forest_fits_with_the_train_seed() -> None:
    pytest.importorskip("sklearn")
    from parabench.forest.hist import forest_params

    workload = workloads.get("random_forest")
    config = _config("random_forest", seed=3, train_seed=11)
    with methods.get("serial").session(workload, config) as session:
        est = session.fit(workload.dataset(config))
    assert est.get_params()["random_state"] == 11
    assert forest_params(workload, config).seed == 11
    assert forest_params(workload, config.replace(train_seed=None)).seed == 3


def test_the_train_seed_is_part_of_the_case() -> None:
    plain, other = _config("mlp"), _config("mlp", train_seed=1000)
    assert plain.training_seed == 0 and other.training_seed == 1000
    assert plain.key() != other.key()
    assert CaseId.of(plain).parity_slot != CaseId.of(other).parity_slot
    assert CaseId.of(plain).work != CaseId.of(other).work
    assert other.label().endswith(" train_seed=1000 r0") and "train_seed" not in plain.label()
    assert RunConfig.from_dict(other.to_dict()) == other
    with pytest.raises(ConfigError, match="train_seed"):
        _config("mlp", train_seed=-1)
