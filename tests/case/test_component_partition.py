"""Time components partition the epoch: exclusive, and summing to its seconds within 5 %.

Every method that reports components runs one real tiny case through ``execute`` (one epoch,
mlp or random_forest, 2 workers where it is distributed, one thread each); each epoch's
components must sum to that epoch's seconds within ``TOLERANCE`` and none may be negative.
The ratio compares the case's own clock reads with each other, not with a wall-clock budget.
The unit tests pin the two mechanisms: :class:`~parabench.core.clock.Spans` nesting (a
scripted timer, no sleeps) and :func:`~parabench.torch.session.fold_epochs` taking the
slowest rank's components (a max per component, planted back, fails the sum).

TensorFlow's torch-family methods (``tf_serial``, ``tf_multiworker``) report no components, so
there is nothing of theirs to add up; ``tf_mirrored`` needs two GPUs.
"""

from __future__ import annotations

from typing import Any

import pytest

from parabench import hardware
from parabench.case.execute import execute
from parabench.config import RunConfig
from parabench.core.clock import Spans
from parabench.method import EpochStats
from parabench.registry import methods
from parabench.torch.loop import partition
from parabench.torch.session import fold_epochs

#: how far the components' sum may stray from the epoch's seconds (issue #15, point 10)
TOLERANCE = 0.05

#: method -> (workload, workers, options): one cheap real case per method
CASES: dict[str, tuple[str, int, dict[str, Any]]] = {
    "serial": ("mlp", 1, {}),
    "model_parallel": ("mlp", 1, {}),
    "ddp": ("mlp", 2, {}),
    "fsdp": ("mlp", 2, {}),
    "pipeline": ("mlp", 2, {"schedule": "1f1b", "microbatches": 4}),
    "hybrid": ("mlp", 4, {"stages": 2, "microbatches": 2}),
    "fedavg": ("mlp", 2, {"clients": 2}),
    "tp": ("gpt", 2, {}),  # tensor parallelism needs a workload with a plan
    "fsdp_tp": ("gpt", 4, {"tp": 2}),
    "pipeline_tp": ("gpt", 4, {"tp": 2, "stages": 2}),
    "rf_torch": ("random_forest", 1, {}),  # histogram forest: binning + grow
    "rf_mpi": ("random_forest", 2, {}),  # the round trip: slowest rank + gather/merge
}


def _marks(name: str) -> list[Any]:
    marker = {req: mark for mark, req in hardware.markers().items()}
    marks = [getattr(pytest.mark, marker[r]) for r in sorted(methods.get(name).requires)
             if r in marker]
    slow = ("hybrid", "rf_mpi", "fsdp_tp", "pipeline_tp")  # 4 ranks on the 2 cores
    return marks + ([pytest.mark.slow] if name in slow else [])


def assert_partition(epoch_s: float, components: dict[str, float], what: str) -> float:
    """The components' sum over the epoch's seconds (asserted within TOLERANCE)."""
    assert components, f"{what}: no components"
    negative = {k: v for k, v in components.items() if v < 0}
    assert not negative, f"{what}: negative components {negative}"
    ratio = sum(components.values()) / epoch_s
    assert abs(ratio - 1) <= TOLERANCE, (
        f"{what}: components sum to {ratio:.3f} x the epoch ({epoch_s:.4f} s): {components}")
    return ratio


@pytest.mark.cpu
@pytest.mark.parametrize("method", [pytest.param(m, marks=_marks(m)) for m in CASES])
def test_components_add_up_to_the_epoch(method: str) -> None:
    workload, workers, options = CASES[method]
    config = RunConfig(workload=workload, method=method, workers=workers,
                       threads_per_worker=1, profile="tiny", epochs=1, options=options)
    result = execute(config)
    assert result.status == "ok", (result.reason, result.extra.get("traceback"))
    for i, seconds in enumerate(result.epoch_s):
        comps = {name: values[i] for name, values in result.components.items()}
        ratio = assert_partition(seconds, comps, f"{method} epoch {i}")
        shares = ", ".join(f"{k} {v / seconds:.3f}" for k, v in sorted(comps.items()))
        print(f"{method}: components / epoch = {ratio:.4f} ({shares})")


# -- the mechanisms ------------------------------------------------------------------------


def scripted(*reads: float) -> Any:
    """A timer returning ``reads`` in order (no sleeps: the test owns time)."""
    it = iter(reads)
    return lambda: next(it)


def test_a_nested_span_is_taken_out_of_its_parent() -> None:
    spans = Spans(timer=scripted(0.0, 1.0, 1.5, 2.0, 2.25, 5.0, 5.0, 6.0))
    with spans("backward"):  # 0 .. 5
        with spans("communication"):  # 1 .. 1.5
            pass
        with spans("backward"):  # 2 .. 2.25: the same name nested counts once
            pass
    with spans("optimizer"):  # 5 .. 6
        pass
    got = spans.seconds()
    assert got == pytest.approx({"backward": 4.5, "communication": 0.5, "optimizer": 1.0})
    assert sum(got.values()) == pytest.approx(6.0)  # exactly the covered time
    spans.reset()
    assert spans.seconds() == {}


def test_a_span_that_raises_still_closes() -> None:
    spans = Spans(timer=scripted(0.0, 1.0, 3.0, 4.0))
    with pytest.raises(RuntimeError), spans("forward"), spans("communication"):
        raise RuntimeError("boom")
    # forward 0 .. 4 holds communication 1 .. 3, closed by the exception on its way out
    assert spans.seconds() == pytest.approx({"forward": 2.0, "communication": 2.0})


def test_cuda_spans_nest_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA path (events read after the sync) with stand-in events on a scripted clock."""
    torch = pytest.importorskip("torch")
    clock = scripted(0.0, 1.0, 1.5, 3.0)

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.at = float("nan")

        def record(self) -> None:
            self.at = clock()

        def elapsed_time(self, end: Event) -> float:
            return (end.at - self.at) * 1e3  # milliseconds, as CUDA's

    monkeypatch.setattr(torch.cuda, "Event", Event)
    spans = Spans(cuda=True)
    with spans("forward"), spans("communication"):  # 0 .. 3 holds 1 .. 1.5
        pass
    assert spans.seconds() == pytest.approx({"forward": 2.5, "communication": 0.5})


def _rank(seconds: float, **components: float) -> EpochStats:
    return EpochStats(seconds=seconds, loss=1.0, samples=10,
                      components=partition(components, seconds))


#: two ranks with different balances: rank 0 computes longer, rank 1 waits longer
RANKS = [_rank(2.0, forward=1.5, communication=0.3, idle=0.1),
         _rank(2.1, forward=0.9, communication=0.4, idle=0.7)]


def test_fold_takes_the_slowest_ranks_components() -> None:
    folded = fold_epochs(RANKS)
    assert folded.seconds == 2.1
    assert folded.components == RANKS[1].components
    assert_partition(folded.seconds, folded.components, "folded")
    with pytest.raises(ValueError):
        fold_epochs([])


def test_a_max_per_component_fold_double_counts() -> None:
    """The old fold (each component's maximum over ranks) overshoots: the check catches it."""
    names = {n for r in RANKS for n in r.components}
    mixed = {n: max(r.components.get(n, 0.0) for r in RANKS) for n in names}
    with pytest.raises(AssertionError, match="components sum to"):
        assert_partition(max(r.seconds for r in RANKS), mixed, "max-fold")


def test_partition_names_the_rest_and_never_hides_a_double_count() -> None:
    assert partition({"forward": 0.6, "other": 9.0}, 1.0) == pytest.approx(
        {"forward": 0.6, "other": 0.4})
    over = partition({"forward": 0.8, "backward": 0.8}, 1.0)  # overlapping spans
    assert over["other"] == 0.0
    with pytest.raises(AssertionError):
        assert_partition(1.0, over, "overlap")
