"""A workload's version (:mod:`parabench.workloads.version`): the same in every process, new
when the code or size table that defines the model or data changes, unmoved by unrelated code;
``compare`` does not compare a case across versions and says so, ``--resume`` runs it again;
results without a version compare and resume as before."""

from __future__ import annotations

import dataclasses
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import parabench.workloads  # noqa: F401  (registers the workloads)
from parabench.analysis.compare import compare, format_comparison
from parabench.case.result import Result, read_results
from parabench.registry import workloads
from parabench.stopping import Epochs
from parabench.sweep.plan import Grid
from parabench.sweep.run import resumable, run_grid
from parabench.workloads.version import (
    LENGTH,
    defining_modules,
    versions_differ,
    workload_libraries,
    workload_version,
)
from sweepdata import case, write

pytestmark = pytest.mark.cpu

NARROW = '''
from parabench.workloads.mlp import MLP

SIZES = {"tiny": (2_048, 8_192, 32, 4)}
HIDDEN = 64


class Edited(MLP):
    name = "edited_mlp"

    def build_model(self, data, seed):
        from plugpkg.layers import stack

        return stack(data, HIDDEN)
'''


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A plugin package ``plugpkg``: the workload (``net.py``, with a size table), a module
    it builds its model from (``layers.py``) and one it never imports (``other.py``)."""
    pkg = tmp_path / "plugpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "net.py").write_text(NARROW)
    (pkg / "layers.py").write_text("def stack(data, hidden):\n    return hidden\n")
    (pkg / "other.py").write_text("UNRELATED = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("plugpkg")]:
        monkeypatch.delitem(sys.modules, name)
    return pkg


def _edited(plugin: Path) -> type:
    return importlib.import_module("plugpkg.net").Edited


def test_the_version_is_short_hex_and_the_same_in_another_process() -> None:
    mine = {name: workload_version(workloads.get(name)) for name in ("mlp", "cnn", "gpt2")}
    code = ("import json, parabench.workloads\nfrom parabench.registry import workloads\n"
            "from parabench.workloads.version import workload_version\n"
            "print(json.dumps({n: workload_version(workloads.get(n)) "
            "for n in ('gpt2', 'cnn', 'mlp')}))")
    other = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                      text=True, check=True, timeout=120).stdout)
    assert other == mine
    assert all(len(v) == LENGTH and int(v, 16) >= 0 for v in mine.values())
    assert len(set(mine.values())) == 3  # each workload its own


def test_mlp_is_defined_by_its_module_its_data_and_the_base_not_by_the_rest() -> None:
    modules = set(defining_modules(type(workloads.get("mlp"))))
    assert {"parabench.workloads.mlp", "parabench.workloads.tabular",
            "parabench.workload"} <= modules
    # how it is trained and timed, and the other workloads, are not what it is
    for unrelated in ("parabench.cli", "parabench.torch.loop", "parabench.case.lifecycle",
                      "parabench.workloads.gpt2", "parabench.workloads.datacache"):
        assert unrelated not in modules
    assert "parabench.workloads.models.gpt" in defining_modules(type(workloads.get("gpt2")))


def test_a_size_table_edit_is_a_new_version(plugin: Path) -> None:
    edited = _edited(plugin)
    before = workload_version(edited)
    assert workload_version(edited) == before
    net = plugin / "net.py"
    net.write_text(net.read_text().replace("HIDDEN = 64", "HIDDEN = 256"))
    assert workload_version(edited) != before


def test_an_edit_of_a_module_the_model_is_built_from_is_a_new_version(plugin: Path) -> None:
    edited = _edited(plugin)
    assert "plugpkg.layers" in defining_modules(edited)  # imported inside build_model
    before = workload_version(edited)
    (plugin / "layers.py").write_text("def stack(data, hidden):\n    return 2 * hidden\n")
    assert workload_version(edited) != before


def test_comments_and_docstrings_are_not_a_new_version(plugin: Path) -> None:
    edited = _edited(plugin)
    before = workload_version(edited)
    net = plugin / "net.py"
    net.write_text('"""The plugin\'s network, documented."""\n# a comment\n\n\n'
                   + net.read_text())
    assert workload_version(edited) == before  # a documenting commit still compares


def test_an_edit_elsewhere_is_the_same_version(plugin: Path) -> None:
    edited = _edited(plugin)
    before = workload_version(edited)
    (plugin / "other.py").write_text("UNRELATED = 2  # and longer\n")
    assert "plugpkg.other" not in defining_modules(edited)
    assert workload_version(edited) == before


def test_recorded_libraries_tell_changed_code_from_a_changed_library(plugin: Path) -> None:
    edited = _edited(plugin)
    version, libs = workload_version(edited), workload_libraries(edited)
    assert libs.get("sklearn")  # mlp's tabular data: scikit-learn's version is in it
    assert workload_version(edited, libs=libs) == version
    newer = {**libs, "sklearn": libs["sklearn"] + ".post1"}
    assert workload_version(edited, libs=newer) != version  # a new library: a new version
    net = plugin / "net.py"
    net.write_text(net.read_text().replace("HIDDEN = 64", "HIDDEN = 256"))
    assert workload_version(edited, libs=libs) != version  # new code, same libraries


def test_versions_differ_only_when_both_are_known() -> None:
    assert versions_differ(["a"], ["b"])
    assert not versions_differ(["a"], ["a"])
    assert not versions_differ([None], ["b"]) and not versions_differ(["a"], [None])
    assert not versions_differ(["a", None], ["a"])


def _versioned(results: list[Result], version: str | None) -> list[Result]:
    return [dataclasses.replace(r, workload_version=version) for r in results]


def _mlp_and_cnn(slow: float, mlp_version: str | None, cnn_version: str = "cccc") -> list[Result]:
    mlp = [case("mlp", "serial", 1, repeat=i, slow=slow) for i in range(3)]
    cnn = [case("cnn", "serial", 1, repeat=i) for i in range(3)]
    return _versioned(mlp, mlp_version) + _versioned(cnn, cnn_version)


def test_compare_does_not_compare_a_changed_workload_and_says_so_once() -> None:
    # the widened mlp trains 2.5x slower: another model, not a regression
    cmp = compare(_mlp_and_cnn(1.0, "a1b2"), _mlp_and_cnn(2.5, "c3d4"))
    text = format_comparison(cmp)
    assert "mlp changed since BASE (version a1b2 -> c3d4): not compared (1 case)" in text
    assert "SLOWER 150%" not in text and "mlp/serial" not in text
    assert [c.key[0] for c in cmp.changes] == ["cnn"]  # the unchanged workload still compares
    assert "no regression among 1 matched case(s)" in text
    assert cmp.exit_code == 0 and not cmp.regressed


@pytest.mark.parametrize("versions", [("a1b2", "a1b2"), (None, "c3d4"), (None, None)])
def test_the_same_or_an_unknown_version_compares_as_before(versions: tuple) -> None:
    cmp = compare(_mlp_and_cnn(1.0, versions[0]), _mlp_and_cnn(2.5, versions[1]))
    text = format_comparison(cmp)
    assert "changed since BASE" not in text and not cmp.changed
    assert any("mlp/serial" in line and "SLOWER 150%" in line for line in text.splitlines())
    assert cmp.exit_code == 1


def test_the_compare_command_says_it_for_two_files(tmp_path: Path) -> None:
    base = write(tmp_path / "base.jsonl", _mlp_and_cnn(1.0, "a1b2"))
    new = write(tmp_path / "new.jsonl", _mlp_and_cnn(2.5, "c3d4"))
    proc = subprocess.run([sys.executable, "-m", "parabench", "compare", str(base), str(new)],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "mlp changed since BASE (version a1b2 -> c3d4): not compared" in proc.stdout
    assert "SLOWER 150%" not in proc.stdout and "mlp/serial" not in proc.stdout


def test_resume_takes_only_results_of_the_current_version_as_done() -> None:
    now = workload_version(workloads.get("mlp"))
    current, stale, old = _versioned([case("mlp", "serial", 1, repeat=0)], now) + _versioned(
        [case("mlp", "serial", 1, repeat=1)], "0000deadbeef") + _versioned(
        [case("mlp", "serial", 1, repeat=2)], None)
    said: list[str] = []
    done = resumable([current, stale, old], {"mlp"}, said.append)
    # the current version and an older result without one are done; repeat 1 runs again
    assert sorted(r.repeat for r in done.values()) == [current.repeat, old.repeat] == [0, 2]
    assert said == [f"mlp changed since its recorded results (version 0000deadbeef -> {now}): "
                    "1 recorded ok result(s) not taken as done, run again"]


def test_resume_reruns_a_case_recorded_under_another_version(fault_plugin: Path,
                                                             tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.jsonl"
    grid = Grid(workloads=["fault_ok"], methods=["serial"], devices=["cpu"], stop=Epochs(1),
                profile="tiny")
    [first] = run_grid(grid, out=out)
    assert first.workload_version == workload_version(workloads.get("fault_ok"))
    [same] = run_grid(grid, out=out, resume=True)
    assert same.timestamp == first.timestamp  # the same version: done, not run again
    out.write_text(out.read_text().replace(first.workload_version, "0000deadbeef"))
    [again] = run_grid(grid, out=out, resume=True)
    # run again: the file held only the stale version, so the current one is a new run (the
    # timestamps may share a second on a fast machine: not the evidence)
    assert again.status == "ok" and again.workload_version == first.workload_version
    assert [r.workload_version for r in read_results(out)] == ["0000deadbeef",
                                                              first.workload_version]
    assert "fault_ok changed since its recorded results" in capsys.readouterr().err


def test_a_rerun_takes_no_round_ratio_of_a_changed_workload(tmp_path: Path) -> None:
    from parabench.sweep.rerun import Rounds, round_ratios

    base = write(tmp_path / "base.jsonl", _mlp_and_cnn(1.0, "a1b2"))
    new = write(tmp_path / "new.jsonl", _mlp_and_cnn(2.5, "c3d4"))
    ratios = round_ratios(Rounds(out_dir=tmp_path, files={"base": [base], "new": [new]}))
    assert [r.case.split("/")[0] for r in ratios] == ["cnn"]  # mlp: another model, no ratio
