"""The CLI run as a user runs it: a subprocess, its exit code, stdout and stderr."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.case.result import read_results

pytestmark = pytest.mark.cpu


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parabench", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, stdin=subprocess.DEVNULL)


def test_list_json_names_everything_and_says_what_runs_here() -> None:
    proc = cli("list", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"mlp", "random_forest"} <= {w["name"] for w in data["workloads"]}
    serial = next(m for m in data["methods"] if m["name"] == "serial")
    assert serial["runnable"]["cpu"] is True
    if not serial["runnable"]["cuda"]:
        assert "CUDA" in serial["reason"]["cuda"]


def test_list_groups_methods_by_family_one_line_each_within_120_columns() -> None:
    proc = cli("list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Workloads:"
    assert max(map(len, lines)) <= 120
    methods = json.loads(cli("list", "--json").stdout)["methods"]
    headings = [ln.split(": device")[0] for ln in lines if ln.endswith("runnable here?")]
    for expected in ("Baseline (every workload)", "Training methods (torch)",
                     "TensorFlow methods (torch, compared with tf_serial)",
                     "Random-forest engines (random_forest)", "Peers (random_forest)"):
        assert expected in headings
    under, heading = {}, None  # method -> the heading it is listed under
    for line in lines:
        if line.endswith("runnable here?"):
            heading = line.split(": device")[0]
        elif line == "Why not here:":  # the footnotes, under the last group
            heading = None
        elif heading and line.startswith("  "):
            under.setdefault(line.split()[0], []).append(heading)
    assert {m["name"]: [m["group"]] for m in methods} == under  # each once, in its group
    group = {m["name"]: m["group"] for m in methods}
    assert group["ddp"] == "Training methods (torch)"
    assert group["tf_serial"].startswith("TensorFlow methods")
    assert {n for n, g in group.items() if g.startswith("Random-forest engines")} == {
        "rf_threads", "rf_processes", "rf_dask", "rf_dask+threads", "rf_mpi", "rf_spark",
        "rf_torch", "rf_tf", "rf_numba", "rf_threads+torch", "rf_torch+dask",
        "rf_dask+threads+torch"}
    assert {n for n, g in group.items() if g.startswith("Peers")} == {
        "xgboost", "lightgbm", "cuml"}
    # a device a method cannot use here names its footnote, and the footnote says why
    for m in methods:
        for device, reason in m["reason"].items():
            [line] = [ln for ln in lines if ln.split()[:1] == [m["name"]]]
            mark = line.split(f"{device} no ")[1].split()[0]
            assert any(ln.startswith(mark) for ln in lines), (line, reason)


def test_env_reports_the_runtime() -> None:
    proc = cli("env", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["cpu"]["logical_cores"] >= 1 and info["ram_gb"]["total"] > 0
    assert {"torch", "mpi", "java", "engines", "threads", "disk_gb"} <= set(info)
    assert "torch" in info["engines"]
    assert "python" in cli("env").stdout


#: the usage error checked through a subprocess; the others call parabench.cli.main here
E2E_USAGE_ERROR = ["run", "--workload", "resnet9000"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "--workload", "resnet9000"], "unknown workload 'resnet9000'; valid: "),
        (["run", "--method", "nope"], "unknown method 'nope'; valid: "),
        (["run", "--method", "serial,threads"],
         "'threads' is now 'rf_threads' (random-forest engines are namespaced)"),
        (["run", "--workers", "0"], "invalid worker counts"),
        (["run", "--workers", "two"], "invalid worker counts"),
        (["run", "--batch-size", "-3"], "invalid batch sizes"),
        (["run", "--profile", "huge"], "'huge' is not one of tiny, quick, full"),
        (["run", "--device", "tpu"], "'tpu' is not one of cpu, cuda"),
        (["run", "--timeout", "0"], "--timeout must be > 0"),
        (["run", "--timeout", "nan"], "--timeout must be > 0 and finite"),
        (["run", "--timeout", "inf"], "--timeout must be > 0 and finite"),
        (["run", "--epochs", "0"], "--epochs"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: list[str], expected: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    if args == E2E_USAGE_ERROR:  # as a user runs it
        proc = cli(*args)
    else:  # the same main() in this process, without an interpreter's start-up each
        from parabench.cli import main

        capsys.readouterr()
        code = main(args)
        out, err = capsys.readouterr()
        proc = subprocess.CompletedProcess(args, code, out, err)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("parabench: error: ") and expected in lines[0]
    assert proc.stdout == ""


@pytest.mark.slow
@pytest.mark.torch
def test_run_both_baselines_writes_results_and_a_table(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PARABENCH_PRESTART", raising=False)  # the default: torch cases fork
    out = tmp_path / "res.jsonl"
    grid = ("run", "--workload", "mlp,random_forest", "--method", "serial", "--profile", "tiny",
            "--epochs", "2", "--repeats", "2", "--out", str(out))
    proc = cli(*grid, "--wide")
    assert proc.returncode == 0, proc.stderr
    results = list(read_results(out))
    assert {(r.workload, r.status) for r in results} == {("mlp", "ok"), ("random_forest", "ok")}
    assert len(results) == 4
    # mlp's cases forked from the sweep's pre-started interpreter (core.prestart), whose
    # import is kept beside the case, not in its start-up; the forest's, which do not train
    # with torch, started plainly (they would read the server's torch pages as their own)
    forked = {r.workload: r.facts.prestart_import_s is not None for r in results}
    assert forked == {"mlp": True, "random_forest": False}, [r.extra for r in results]
    assert all((r.facts.prestart_import_s or 0) > 0 for r in results if r.workload == "mlp")
    header, _rule, *rows = proc.stdout.strip().splitlines()[:4]
    assert header.split()[:3] == ["workload", "method", "device"]
    assert "speedup" in header and "samples/s" in header
    assert any(r.startswith("mlp") and "accuracy" in r and "1.00x" in r for r in rows)
    assert any(r.startswith("random_forest") for r in rows)
    assert "4 case(s)" in proc.stdout
    # the default table of the same results (--resume: nothing runs again), piped: compact
    compact = cli(*grid, "--resume")
    assert compact.returncode == 0, compact.stderr
    lines = compact.stdout.splitlines()
    assert max(map(len, lines)) <= 120 < max(map(len, proc.stdout.splitlines()))
    assert lines[0] == "cpu · profile tiny · 2 repeats"  # one value in every row
    assert lines[1].split()[:3] == ["workload", "method", "workers"] and "epoch" not in lines[1]
    for row in rows:  # each row keeps its figures: samples/s, speedup, memory, parity, quality
        # (not scaling: the compact table drops it where a busy machine's "!" marks leave no
        # room in 120 columns; the marks themselves sit in other cells in the two tables)
        cells = [c.strip() for c in row.replace("!", "").split("  ") if c.strip()]
        compact_row = next(ln for ln in lines if ln.startswith(cells[0])).replace("!", "")
        speed = [c for c in cells if "±" in c or re.fullmatch(r"[\d.]+x \(t=\d+\)", c)]
        missing = [c for c in [*speed, *cells[-3:]] if c not in compact_row]
        assert len(speed) == 2 and not missing, (missing, row, compact_row)


def test_a_failing_case_exits_1_and_skipped_cases_exit_0(
    fault_plugin: Path, tmp_path: Path
) -> None:
    out = tmp_path / "res.jsonl"
    proc = cli("run", "--workload", "fault_ok,fault_raise", "--method", "serial",
               "--profile", "tiny", "--out", str(out))
    assert proc.returncode == 1
    assert "failed: RuntimeError: boom in fit" in proc.stdout

    # in a sweep, a case that cannot run here is a skip, not an error (a grid in which
    # every case would be skipped is a usage error: tests/isolation/test_faults.py)
    proc = cli("run", "--workload", "fault_ok", "--method", "serial", "--device", "cpu,cuda",
               "--profile", "tiny", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "skipped: serial runs fault_ok on cpu, not cuda" in proc.stdout


def test_bad_data_dir_is_a_usage_error_recorded_in_the_results(tmp_path: Path) -> None:
    out = tmp_path / "res.jsonl"
    empty = tmp_path / "empty"  # exists, holds no dataset: found inside the case
    empty.mkdir()
    proc = cli("run", "--workload", "cnn", "--method", "serial", "--profile", "tiny",
               "--epochs", "1", "--data-dir", str(empty), "--out", str(out))
    assert proc.returncode == 2
    assert "parabench: error: " in proc.stderr and "empty" in proc.stderr
    [result] = read_results(out)
    assert result.status == "failed" and result.facts.config_error is True


def test_data_dir_for_a_synthetic_only_workload_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    out = tmp_path / "res.jsonl"
    proc = cli("run", "--workload", "mlp", "--method", "serial", "--profile", "tiny",
               "--data-dir", str(tmp_path), "--out", str(out))
    assert proc.returncode == 2
    assert "--data-dir applies to none of the selected methods (serial) or workloads (mlp)" \
        in proc.stderr
    assert not out.exists()


@pytest.mark.slow
def test_option_flags_sweep_as_grid_axes(tmp_path: Path) -> None:
    out = tmp_path / "res.jsonl"
    proc = cli("run", "--workload", "mlp", "--method", "serial", "--profile", "tiny",
               "--epochs", "1", "--precision", "fp32,bf16", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    options = sorted(r.config["options"]["precision"] for r in read_results(out))
    assert options == ["bf16", "fp32"]
    assert "precision=bf16" in proc.stdout and "precision=fp32" in proc.stdout
    bad = cli("run", "--precision", "fp8")
    assert bad.returncode == 2 and "'fp8' is not one of fp32, bf16, fp16" in bad.stderr


@pytest.mark.slow
def test_the_default_run_plans_the_coverage_grid_and_all_plans_the_full_sweep(
    tmp_path: Path,
) -> None:
    # the expected plan is computed in a fresh interpreter, as the CLI's: other tests register
    # plugin methods (tests/plugins) in this process, which the CLI never sees
    expected = subprocess.run(
        [sys.executable, "-c",
         "from parabench.registry import methods\n"
         "from parabench.stopping import Epochs\n"
         "from parabench.sweep.plan import Grid, plan\n"
         "print(','.join(methods.names()))\n"
         "print(len(plan(Grid(coverage=True, profile='tiny', stop=Epochs(1)))))\n"
         "print(len(plan(Grid())))"],
        capture_output=True, text=True, check=True).stdout.split()
    names, coverage, full_sweep = set(expected[0].split(",")), int(expected[1]), expected[2]
    out = str(tmp_path / "r.jsonl")
    proc = cli("run", "--dry-run", "--out", out)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split()[1] for line in proc.stdout.splitlines()
            if line.startswith(("  run ", "  skip "))]
    assert {row.split("/")[1] for row in rows} == names
    assert "estimated" in proc.stdout
    assert len(rows) == coverage
    full = cli("run", "--all", "--dry-run", "--out", out)
    assert full.returncode == 0, full.stderr
    assert f"{full_sweep} case(s) planned" in full.stdout
