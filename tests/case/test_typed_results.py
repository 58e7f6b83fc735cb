"""Typed results (issue #23): records round-trip, schema 1 still reads, grading is declared,
and nothing in src/ decides on the free-form ``extra`` / session ``notes``."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import math
from pathlib import Path

import pytest

from parabench.analysis.parity import assess, parity_kind, tolerance
from parabench.case.result import SCHEMA, QualityValue, Result, read_results
from parabench.config import RunConfig
from parabench.core.records import Energy, Facts, Grading, Machine, Parity, TimeToTarget, Window
from parabench.registry import methods, workloads
from parabench.sweep.table import format_table, summarize

pytestmark = pytest.mark.cpu

DATA = Path(__file__).parents[1] / "data"
SRC = Path(__file__).parents[2] / "src" / "parabench"
#: written by parabench at 25d0fdb (schema 1): mlp serial/ddp, random_forest serial/threads
#: (read as rf_threads), seq2seq serial/ddp x2 (extra.parity_kind), cnn with a missing
#: --data-dir (extra.config_error)
SCHEMA1 = DATA / "schema1.jsonl"


def _result(**changes: object) -> Result:
    base = dict(workload="mlp", method="serial", device="cpu", workers=1, threads_per_worker=1,
                batch_size=64, epochs=1, profile="tiny", seed=0, repeat=0, status="ok",
                quality=QualityValue(name="accuracy", value=0.8, higher_is_better=True))
    base.update(changes)
    return Result(**base)  # type: ignore[arg-type]


def test_every_record_round_trips_through_strict_json() -> None:
    r = _result(
        window=Window(unit="steps", steps=5, steps_source="--steps", target_s=0.5, warmup=1),
        time_to_target=TimeToTarget(target=0.9, reached=True, epoch=2, train_s=3.0),
        energy=Energy(source="rapl", joules_per_epoch=[1.0, math.nan], joules_per_sample=0.1),
        parity=Parity(status="ok", kind="exact", basis="trajectory", gap=0.0,
                      tolerance={"loss_rel": 5e-5, "weight_rel_l2": 1e-3}, loss_rel_max=1e-7,
                      weight_rel_l2=2e-7),
        machine=Machine(cores=2, cores_in_use=1, busy=True, load_1m_before=3.0),
        grading=Grading(kind="statistical", reason="why"),
        facts=Facts(config_error=True, predictions_sha="abc", samples_per_client=[1, 2],
                    rank_threads=[1, 1]),
    )
    text = r.to_json()
    assert "NaN" not in text  # strict: the NaN is null, its path noted
    data = json.loads(text)
    assert data["schema"] == SCHEMA == 2
    assert data["energy"]["joules_per_epoch"] == [1.0, None]
    assert data["grading"] == {"kind": "statistical", "reason": "why"}
    back = Result.from_dict(data)
    assert back.energy is not None and math.isnan(back.energy.joules_per_epoch[1])
    assert back.extra == {"non_finite": ["energy.joules_per_epoch[1]=nan"]}
    assert dataclasses.replace(back, energy=r.energy, extra={}) == r
    assert back.parity == r.parity and back.facts == r.facts and back.window == r.window


def test_a_record_given_as_a_dict_becomes_the_record() -> None:
    r = _result(parity={"status": "ok", "kind": "exact"}, machine={"busy": True})
    assert isinstance(r.parity, Parity) and r.parity.status == "ok"
    assert isinstance(r.machine, Machine) and r.machine.busy


def test_schema_1_results_written_by_main_still_read_with_their_facts_typed() -> None:
    rs = list(read_results(SCHEMA1))
    assert len(rs) == len(SCHEMA1.read_text().splitlines()) == 11
    assert all(r.schema == SCHEMA for r in rs)
    forests = [r for r in rs if r.workload == "random_forest"]
    assert forests and all(r.facts.predictions_sha == "2b03606de92bff59" for r in forests)
    assert all("predictions_sha" not in r.extra for r in forests)
    ddp = next(r for r in rs if r.method == "ddp" and r.workload == "mlp")
    assert ddp.facts.rank_threads and ddp.facts.self_max_rss_mb and ddp.grading is None
    assert "rank_threads" not in ddp.extra and ddp.extra["rank_devices"] == ["cpu"]
    seq = next(r for r in rs if r.method == "ddp" and r.workload == "seq2seq")
    assert seq.grading is not None and seq.grading.kind == "statistical"
    assert "mean over tokens" in (seq.grading.reason or "")
    assert "parity_kind" not in seq.extra
    bad = next(r for r in rs if r.workload == "cnn")
    assert bad.status == "failed" and bad.facts.config_error
    assert all(not r.facts.config_error for r in rs if r is not bad)
    assert isinstance(ddp.parity, Parity) and isinstance(ddp.machine, Machine)
    assert isinstance(ddp.window, Window) and ddp.window.warmup == 1


def test_schema_1_results_give_the_table_and_verdicts_they_gave_before() -> None:
    rs = list(read_results(SCHEMA1))
    # the table main printed for this file (tests/data/schema1_table.txt, by 25d0fdb; since
    # then its "threads" rows read as rf_threads, the method column 3 wider, and seq2seq/ddp's
    # statistical ok, which recorded no power, reads "ok, power unknown: none recorded", never
    # a bare ok): its rows, every
    # column (the legend under them is prose, reworded and rewrapped freely)
    assert _table_rows(format_table(summarize(rs), **_WIDE)) == _table_rows(
        (DATA / "schema1_table.txt").read_text())
    serial = [r for r in rs if r.method == "serial"]
    verdicts = [(r.workload, r.method, r.workers, p.status, p.kind, p.basis)
                for r in rs if (p := assess(r, serial)) is not None]
    assert verdicts == [  # assess of 25d0fdb on the same file
        ("mlp", "serial", 1, "not-applicable", "baseline", None),
        ("mlp", "serial", 1, "not-applicable", "baseline", None),
        ("mlp", "ddp", 1, "ok", "exact", "trajectory"),
        ("mlp", "ddp", 2, "ok", "exact", "trajectory"),
        ("random_forest", "serial", 1, "not-applicable", "baseline", None),
        # recorded as "threads": read under its current name (parabench.registry)
        ("random_forest", "rf_threads", 1, "ok", "exact", "predictions"),
        ("random_forest", "rf_threads", 2, "ok", "exact", "predictions"),
        ("seq2seq", "serial", 1, "not-applicable", "baseline", None),
        ("seq2seq", "serial", 1, "not-applicable", "baseline", None),
        ("seq2seq", "ddp", 2, "ok", "statistical", "quality"),
        ("cnn", "serial", 1, "not-applicable", "baseline", None),
    ]
    # and each is the verdict stored in the file
    stored = [(r.parity.status, r.parity.kind) for r in rs if r.parity is not None]
    assert stored == [v[3:5] for v in verdicts]


#: every column, as the table of 25d0fdb had by default (a later table may hide some unless wide)
_WIDE = {"wide": True} if "wide" in inspect.signature(format_table).parameters else {}


def _table_rows(table: str) -> list[str]:
    """The header and one line per row: everything above the legend."""
    return table.split("\n* fastest")[0].splitlines()


@pytest.mark.parametrize(("method", "workload", "workers", "options", "kind", "why"), [
    ("ddp", "mlp", 2, {}, "exact", None),
    ("ddp", "mlp", 1, {}, "exact", None),
    ("ddp", "vgg11", 2, {}, "statistical", "BatchNorm statistics are all-reduced"),
    ("ddp", "vgg11", 1, {}, "exact", None),  # one rank: the whole batch
    ("fsdp", "densenet121", 2, {}, "statistical", "BatchNorm"),
    ("ddp", "seq2seq", 2, {}, "statistical", "mean over tokens"),
    ("pipeline", "vgg11", 2, {"microbatches": 2}, "statistical", "each micro-batch"),
    ("pipeline", "cnn", 2, {}, "exact", None),
    ("fedavg", "mlp", 2, {}, "statistical", None),
    ("serial", "vgg11", 1, {}, "baseline", None),
])
def test_methods_declare_how_each_workload_is_graded(
        method: str, workload: str, workers: int, options: dict, kind: str,
        why: str | None) -> None:
    config = RunConfig(workload=workload, method=method, workers=workers, profile="tiny",
                       epochs=1, options=options)
    grading = methods.get(method).grading(workloads.get(workload), config)
    assert grading.kind == kind
    assert (why is None and grading.reason is None) or (why or "") in (grading.reason or "")


def test_a_results_grading_decides_its_parity_kind() -> None:
    declared = _result(method="ddp", workers=2)
    assert parity_kind(declared) == ("exact", None)
    bn = dataclasses.replace(declared, grading=Grading(kind="statistical", reason="BN"))
    assert parity_kind(bn) == ("statistical", "BN")
    same = dataclasses.replace(declared, grading=Grading(kind="exact"))
    assert parity_kind(same) == ("exact", None)


@pytest.mark.torch
def test_declared_batchnorm_matches_every_torch_workloads_model() -> None:
    """The grading is declared (``batchnorm``): each tiny model must agree with it (the rank
    programs check the same at run time: check_split_batch_grading)."""
    pytest.importorskip("torch")
    from torch.nn.modules.batchnorm import _BatchNorm

    from parabench.workload import TorchWorkload

    for name in workloads.names():
        w = workloads.get(name)
        if not isinstance(w, TorchWorkload) or not type(w).__module__.startswith("parabench."):
            continue
        model = w.build_model(w.make_data("tiny", 0), seed=0)
        has = any(isinstance(m, _BatchNorm) for m in model.modules())
        assert has == getattr(w, "batchnorm", False), name


@pytest.mark.parametrize("epochs", [1, 3])
def test_parity_tolerance_is_the_one_assess_applies(epochs: int) -> None:
    serial = _result(epochs=epochs)
    for method in ("fedavg", "ddp"):
        kind = methods.get(method).parity
        r = _result(method=method, workers=2, epochs=epochs,
                    quality=QualityValue(name="accuracy", value=0.7, higher_is_better=True))
        parity = assess(r, [serial])
        assert parity is not None and parity.tolerance == tolerance(
            kind, "mlp", "tiny", 0.8, True, epochs)


# -- no control channel: src/ never decides on extra / notes -------------------------------

#: the summary table's Row has its own ``extra`` (its display columns, not Result.extra)
ROW_COLUMNS = {("analysis/summary.py", "TO_TARGET in r.extra"),
               ("sweep/table.py", "TO_TARGET in r.extra"),
               ("sweep/site/html.py", "TO_TARGET in r.extra"),
               ("sweep/table.py", "r.extra.get(h, '-')"),
               ("sweep/site/html.py", "r.extra.get(h, '-')"),
               # shown, not decided on: a pipeline row's bubble in --wide and the report
               ("analysis/summary.py", "r.extra.get(note)")}


def _free_form(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in ("extra", "notes")


def extra_reads(tree: ast.AST) -> list[str]:
    """Every read of an ``.extra`` / ``.notes`` entry: ``x.extra[k]`` (loaded),
    ``x.extra.get(..)``, ``k in x.extra``."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Subscript) and _free_form(node.value)
                and isinstance(node.ctx, ast.Load)):
            found.append(node)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("get", "pop", "items", "keys", "values")
              and _free_form(node.func.value)):
            found.append(node)
        elif isinstance(node, ast.Compare) and any(
                isinstance(op, ast.In | ast.NotIn) for op in node.ops) and any(
                _free_form(c) for c in node.comparators):
            found.append(node)
    return [ast.unparse(n) for n in found]


def src_extra_reads(src: Path = SRC) -> list[str]:
    out = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src).as_posix()
        if rel == "case/result.py":  # the reader of schema 1, which kept facts in extra
            continue
        for expr in extra_reads(ast.parse(path.read_text())):
            if (rel, expr) not in ROW_COLUMNS:
                out.append(f"{rel}: {expr}")
    return out


def test_nothing_in_src_reads_extra_or_notes_to_decide() -> None:
    assert src_extra_reads() == [], "declare the fact in parabench.core.records instead"


def test_the_extra_guard_fires_on_a_planted_read(tmp_path: Path) -> None:
    plant = tmp_path / "analysis"
    plant.mkdir()
    (plant / "parity.py").write_text(
        "def kind(result):\n    return result.extra.get('parity_kind') or 'exact'\n")
    (plant / "cli.py").write_text("def bad(rs):\n    return [r for r in rs if "
                                  "'config_error' in r.extra or r.notes['x']]\n")
    assert src_extra_reads(tmp_path) == [
        "analysis/cli.py: 'config_error' in r.extra", "analysis/cli.py: r.notes['x']",
        "analysis/parity.py: result.extra.get('parity_kind')"]
