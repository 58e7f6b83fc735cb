"""The summary table, the report's plots (read back from the figures) and ``parabench report``."""

from __future__ import annotations

import base64
import dataclasses
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from parabench.analysis.recommend import candidates
from parabench.sweep.table import (
    REASON_WIDTH,
    TABLE_WIDTH,
    format_table,
    summarize,
    terminal_width,
)
from sweepdata import case, skipped, sweep, write

pytestmark = pytest.mark.cpu


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "parabench", *args], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


# --- the summary table ----------------------------------------------------------------------

def test_table_has_memory_and_profile_and_marks_the_fastest_whose_parity_holds() -> None:
    results = sweep(methods=("serial", "ddp"), workers=(1, 2))
    results.append(case("cnn", "fedavg", 2, broken=True))  # fastest of all, but wrong
    table = format_table(summarize(results), wide=True)  # every column, as --wide
    header = table.splitlines()[0]
    assert "peak MB" in header and "profile" in header
    [marked] = [ln for ln in table.splitlines() if " * " in ln]
    assert marked.split()[:4] == ["cnn", "ddp", "*", "cpu"] and "1,100" in marked
    fedavg = next(ln for ln in table.splitlines() if ln.startswith("cnn") and "fedavg" in ln)
    assert "*" not in fedavg and "FAILED" in fedavg and "tiny" in fedavg
    assert "* fastest configuration whose parity holds" in table


def test_speedup_uses_the_serial_case_already_in_the_out_file() -> None:
    rerun = [case("cnn", "ddp", 2)]
    earlier_serial = [case("cnn", "serial", 1)]
    [row] = summarize(rerun)
    assert row.speedup is None
    [row] = summarize(rerun, baselines=earlier_serial)
    expected = (case("cnn", "serial", 1).median_epoch_s / case("cnn", "ddp", 2).median_epoch_s)
    assert row.speedup == pytest.approx(expected) and row.baseline.startswith("serial/cpu")
    assert row.fastest  # its parity holds against that serial case


def test_unsupported_pairs_collapse_into_one_na_line_and_reasons_are_one_line() -> None:
    results = [case("cnn", "serial", 1),
               skipped("cnn", "rf_threads", "rf_threads does not support workload cnn (torch)"),
               skipped("cnn", "rf_dask", "rf_dask does not support workload cnn (torch)"),
               skipped("mlp", "pipeline", "needs 4 cores\n  Traceback line 2\n  line 3")]
    table = format_table(summarize(results))
    assert "rf_threads" not in table.split("n/a")[0] and "rf_dask" not in table.split("n/a")[0]
    assert "n/a (method does not support the workload): cnn x rf_dask, rf_threads" in table
    pipeline = [ln for ln in table.splitlines() if "pipeline" in ln]
    assert len(pipeline) == 1 and pipeline[0].endswith("skipped: needs 4 cores ...")
    assert "Traceback" not in table


def test_extra_columns_show_when_a_row_has_them() -> None:
    [row] = summarize([case("cnn", "serial", 1)])
    table = format_table([dataclasses.replace(row, extra={"time to target": "12.0 s"})])
    header = next(ln for ln in table.splitlines() if ln.endswith("quality / status"))
    assert "time to target" in header and "12.0 s" in table


def _main_job() -> list:
    """The README's main job, crafted: 9 configurations of one workload, a failed case with a
    long reason, one measured on a busy machine."""
    results = sweep(methods=("serial", "ddp", "pipeline", "fsdp", "fedavg"), workers=(1, 2))
    results.append(dataclasses.replace(case("cnn", "pipeline", 4), status="failed",
                                       reason="RuntimeError: " + "a long reason " * 12))
    busy = {"busy": True, "load_1m_before": 5.2, "cores_in_use": 2}
    return [dataclasses.replace(r, machine=busy) if (r.method, r.workers) == ("fsdp", 2) else r
            for r in results]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("  ") if c.strip()]


def test_the_default_table_fits_120_columns_and_wide_shows_every_column() -> None:
    rows = summarize(_main_job())
    compact, wide = format_table(rows).splitlines(), format_table(rows, wide=True).splitlines()
    [failed] = [ln for ln in compact if ln.startswith("pipeline  4")]
    fits = [ln for ln in compact if ln != failed]
    assert max(map(len, fits)) <= TABLE_WIDTH < max(map(len, wide))
    assert compact[0] == "cnn · cpu · profile tiny · batch 64 · 1 repeat"  # one value each
    assert compact[1].split("  ")[0] == "method" and "epoch s" not in compact[1]
    for column in ("samples/s", "speedup", "scaling", "peak MB (PSS)", "parity"):
        assert column in compact[1]
    assert wide[0].split()[:9] == ["workload", "method", "device", "workers", "batch",
                                   "profile", "options", "n", "epoch"]
    assert "--wide shows every column (here also epoch s (IQR))" in compact[-1]
    # the failed row's reason is cut on its row and follows the table whole
    whole = [ln for ln in compact if ln.startswith("cnn/pipeline 4x1: ")]
    assert len(whole) == 1 and not whole[0].endswith("...") and len(whole[0]) <= TABLE_WIDTH
    # every row's cells are the wide table's, marks included (! moves to samples/s)
    body = {(c[1], c[3]): ln for ln in wide[2:12] if (c := _cells(ln))}
    for line in compact[3:13]:
        cells = _cells(line)
        full = body[cells[0], cells[1]]
        assert all(c.removesuffix(" !") in full for c in cells if "..." not in c), line
    [fsdp] = [ln for ln in compact if ln.startswith("fsdp      2x1")]
    assert _cells(fsdp)[2].endswith(" !")
    # a failed case's reason (the wide table's: one line, at most REASON_WIDTH) is cut to
    # the room left, not the figures' columns: scaling stays for them
    reason = _cells(failed)[-1]
    assert reason.startswith("failed: RuntimeError: a long reason") and reason.endswith("...")
    assert reason[:-3] in wide[11] and len(wide[11].split("failed: ")[1]) == REASON_WIDTH
    assert len(failed) <= TABLE_WIDTH and "scaling" in compact[1]
    assert all(len(ln) <= TABLE_WIDTH for ln in wide[13:])  # the legend wraps in both


def test_on_a_terminal_the_full_table_shows_where_it_fits_and_scaling_goes_first() -> None:
    rows = summarize(sweep(methods=("serial", "ddp"), workers=(1, 2)))
    assert format_table(rows, width=250) == format_table(rows, wide=True)
    narrow = format_table(rows, width=90).splitlines()
    assert "scaling" not in narrow[1] and "speedup" in narrow[1]
    assert max(len(ln) for ln in narrow[:6]) <= 90
    assert "(here also epoch s (IQR), scaling)" in narrow[-1]


def test_a_varying_column_stays_a_column_and_one_epoch_results_keep_the_mark() -> None:
    old = dataclasses.replace(case("cnn", "serial", 1, device="cuda"), epoch_s=[25.0])
    rows = summarize([case("cnn", "serial", 1), old])
    lines = format_table(rows).splitlines()
    assert lines[0] == "cnn · profile tiny · batch 64 · 1 repeat"
    assert lines[1].split()[:3] == ["method", "device", "workers"]
    [cuda] = [ln for ln in lines if " cuda " in ln]
    assert _cells(cuda)[3].endswith(" ~")  # the epoch cell's mark, on samples/s


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_width_is_the_terminals_with_rich_and_none_when_piped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert terminal_width(io.StringIO()) is None  # piped: the fixed 120-column table
    pytest.importorskip("rich")
    monkeypatch.setenv("COLUMNS", "157")
    assert terminal_width(_Terminal()) == 157
    monkeypatch.setitem(sys.modules, "rich.console", None)  # rich not installed
    assert terminal_width(_Terminal()) is None


TRAJ_TOL = {"loss_rel": 4e-4, "weight_rel_l2": 4e-4}


@pytest.mark.parametrize(("parity", "cell"), [
    ({"status": "ok", "basis": "trajectory", "gap": 0.0, "loss_rel_max": 1e-7,
      "weight_rel_l2": 2.4e-7, "tolerance": TRAJ_TOL}, "ok w 2e-7"),
    ({"status": "failed", "basis": "trajectory", "gap": 0.01, "loss_rel_max": 3e-2,
      "weight_rel_l2": 6e-3, "tolerance": TRAJ_TOL}, "FAILED loss 3e-2 w 6e-3"),
    ({"status": "ok", "basis": "predictions", "gap": 0.0, "identical": True}, "ok identical"),
    ({"status": "failed", "basis": "predictions", "gap": 0.0, "identical": False},
     "FAILED differs"),
    ({"status": "failed", "basis": "quality", "gap": -0.21, "tolerance": 0.015},
     "FAILED -0.210"),
])
def test_the_parity_column_shows_the_evidence(parity: dict, cell: str) -> None:
    serial = case("cnn", "serial", 1)
    ddp = dataclasses.replace(case("cnn", "ddp", 2), parity=parity)
    row = next(r for r in summarize([serial, ddp]) if r.method == "ddp")
    assert row.parity == cell and cell in format_table([row])


def test_the_worst_repeat_decides_the_parity_cell() -> None:
    ok = {"status": "ok", "basis": "trajectory", "gap": 0.0, "loss_rel_max": 1e-7,
          "weight_rel_l2": 1e-7, "tolerance": TRAJ_TOL}
    worse = {**ok, "weight_rel_l2": 3e-4}
    failed = {**ok, "status": "failed", "loss_rel_max": 5e-2}
    repeats = [dataclasses.replace(case("cnn", "ddp", 2, repeat=i), parity=p)
               for i, p in enumerate([ok, worse])]
    assert summarize(repeats)[0].parity == "ok w 3e-4"
    repeats.append(dataclasses.replace(case("cnn", "ddp", 2, repeat=2), parity=failed))
    assert summarize(repeats)[0].parity.startswith("FAILED loss 5e-2")


def test_a_row_measured_on_a_busy_machine_says_so() -> None:
    busy = {"busy": True, "load_1m_before": 5.2, "load_1m_after": 4.0, "cores_in_use": 2,
            "other_cores": 1.5}  # case/machine.py's keys
    quiet = {"busy": False, "load_1m_before": 0.3, "load_1m_after": 0.5}
    results = [dataclasses.replace(case("cnn", "serial", 1), machine=quiet),
               dataclasses.replace(case("cnn", "ddp", 2), machine=busy)]
    rows = {r.method: r for r in summarize(results)}
    assert rows["serial"].busy == ""
    assert rows["ddp"].busy == "other processes used 1.50 cores, 2 cores in use"
    table = format_table(list(rows.values()))
    [line] = [ln for ln in table.splitlines() if ln.startswith("ddp")]  # cnn: the title line
    assert " !" in line and "! cnn/ddp 2x1: measured on a busy machine: other processes used 1.50" \
        in table
    assert " !" not in next(ln for ln in table.splitlines() if "serial" in ln and "base" in ln)


def test_rows_name_both_baselines_and_what_is_missing() -> None:
    rows = {(r.method, r.workers): r for r in summarize(sweep(workers=(2, 4)))}
    ddp2 = rows[("ddp", 2)]
    assert ddp2.baseline == "serial/cpu t=2 bs=64" and ddp2.scaling_baseline == \
        "serial/cpu t=1 bs=64"
    assert ddp2.speedup == pytest.approx(10.0 / 6.05) and ddp2.scaling_efficiency is None
    table = format_table(list(rows.values()))
    assert "1.65x (t=2)" in table and "- (no t=1)" in table and "- (no t=4)" in table
    assert ("missing baseline: no serial at 1 thread and batch 64: add --method serial "
            "--threads 1 --batch-size 64") in table


# --- the plots, checked on the figure objects -----------------------------------------------

def _lines(ax) -> dict[str, object]:  # label -> Line2D
    return {ln.get_label(): ln for ln in ax.get_lines()}


def test_scaling_plot_has_each_method_the_ideal_line_and_an_amdahl_prediction() -> None:
    pytest.importorskip("matplotlib")
    from parabench.sweep.site.plots import scaling_figure

    cands = candidates(sweep(methods=("serial", "ddp", "pipeline"), workers=(1, 2, 4)))
    ax = scaling_figure(cands).axes[0]
    lines = _lines(ax)
    assert {"serial", "ddp", "pipeline", "ideal (linear)"} <= set(lines)
    assert ax.get_xlabel() == "workers" and ax.get_ylabel() == "speedup over serial"
    [pred] = [k for k in lines if k.startswith("ddp Amdahl prediction @8")]
    assert "serial fraction 0.1" in pred  # 1.1x overhead on f=0.1: the fit sees ~0.1
    xs, ys = lines["ddp"].get_data()
    assert list(xs) == [1, 2, 4]
    ddp = {c.workers: c for c in cands if c.method == "ddp"}
    serial = next(c for c in cands if c.method == "serial")
    assert ys[1] == pytest.approx(ddp[2].throughput / serial.throughput)
    assert lines[pred].get_data()[0][-1] == 8


def test_component_memory_and_curve_plots_carry_the_right_series() -> None:
    pytest.importorskip("matplotlib")
    from parabench.sweep.site.plots import components_figure, curves_figure, memory_figure

    results = sweep(methods=("serial", "ddp"), workers=(1, 2))
    cands = candidates(results)
    ax = components_figure(cands).axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["data", "forward", "backward", "optimizer", "communication"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["ddp 1x2 bs64", "ddp 2x1 bs64",
                                                           "serial 1x2 bs64"]
    mem = memory_figure(cands).axes[0]
    bars = {t.get_text(): p.get_width()  # horizontal bars, top to bottom as ticks bottom-up
            for t, p in zip(mem.get_yticklabels(), mem.patches, strict=True)}
    assert bars == {"serial 1x2 bs64": 750.0, "ddp 2x1 bs64": 1100.0, "ddp 1x2 bs64": 750.0}
    curves = curves_figure(results).axes[0]
    lines = _lines(curves)
    assert set(lines) == {"serial w1 bs64", "ddp w1 bs64", "ddp w2 bs64"}
    assert lines["serial w1 bs64"].get_color() == "black"  # the baseline band
    assert list(lines["ddp w2 bs64"].get_data()[1]) == pytest.approx(results[-1].loss)


def test_batch_sweep_plot_appears_only_with_several_batch_sizes_and_stars_auto() -> None:
    pytest.importorskip("matplotlib")
    from parabench.sweep.site.plots import batch_figure, scope_figures

    one = sweep(methods=("serial",))
    assert batch_figure(candidates(one)) is None
    auto = case("cnn", "serial", 1, batch=256)
    auto = dataclasses.replace(auto, config={**auto.config, "batch_size": "auto"})
    results = [*one, case("cnn", "serial", 1, batch=128), auto]
    figs = scope_figures(candidates(results), results)
    assert "batch" in figs
    ax = figs["batch"].axes[0]
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert labels == ["serial w1", "serial w1 auto-picked batch"]
    assert list(ax.get_lines()[0].get_data()[0]) == [64, 128, 256]


# --- parabench report, run as a user runs it -------------------------------------------------

def test_report_cli_writes_a_self_contained_page_with_the_answer_first(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    results = sweep(methods=("serial", "ddp", "fedavg"), workers=(1, 2, 4))
    results.append(case("cnn", "fsdp", 4, broken=True, slow=0.5))
    results.append(dataclasses.replace(case("cnn", "pipeline", 2), status="failed",
                                       reason="RuntimeError: boom\nTraceback ..."))
    src = write(tmp_path / "r.jsonl", results)
    proc = cli("report", str(src), "--out", str(tmp_path / "rep"))
    assert proc.returncode == 0, proc.stderr
    first = proc.stdout.strip().splitlines()[0]
    assert first.startswith("cnn on cpu (tiny): use fedavg with 4 workers")
    assert f"report: {tmp_path / 'rep' / 'report.html'}" in proc.stdout
    html = (tmp_path / "rep" / "report.html").read_text()
    body = re.sub(r"<style>.*?</style>", "", html, flags=re.S)
    text = re.sub(r"<[^>]+>", " ", body.split("<body>")[1])
    assert text.split()[:3] == ["parabench", "report", "Recommendation"]
    assert "FAILED parity, not recommended: fsdp with 4 workers" in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing from the network
    pngs = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(pngs) == 4 and all(base64.b64decode(p)[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert "RuntimeError: boom" in html and "Amdahl" in html and "PREDICTED at 8" in html
    md = (tmp_path / "rep" / "report.md").read_text().splitlines()
    assert md[:3] == ["# parabench report", "", "## Recommendation"]
    assert md[4].startswith("- cnn on cpu (tiny): use fedavg with 4 workers")
    assert sorted(p.name for p in (tmp_path / "rep").glob("*.png")) == [
        "cnn-cpu-tiny-components.png", "cnn-cpu-tiny-curves.png", "cnn-cpu-tiny-memory.png",
        "cnn-cpu-tiny-scaling.png"]


def test_report_cli_usage_errors(tmp_path: Path) -> None:
    proc = cli("report", str(tmp_path / "missing.jsonl"))
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_version_help_and_dry_run(tmp_path: Path) -> None:
    assert cli("--version").stdout.strip().startswith("parabench ")
    help_text = cli("run", "--help").stdout
    assert "mlp" in help_text and "ddp" in help_text and "(default: 600)" in help_text
    out = tmp_path / "r.jsonl"
    proc = cli("run", "--workload", "mlp", "--method", "serial,ddp,rf_threads", "--workers", "1,2",
               "--profile", "tiny", "--dry-run", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "run   mlp/ddp cpu w=2" in proc.stdout and "skip  mlp/rf_threads" in proc.stdout
    assert "run   mlp/serial cpu w=1 t=1" in proc.stdout  # ddp 2 x 1's scaling baseline
    assert "6 case(s) planned: 4 to run, 2 skipped; estimated" in proc.stdout
    assert not out.exists()


def test_report_without_matplotlib_is_a_usage_error_naming_the_extra(tmp_path: Path) -> None:
    src = write(tmp_path / "r.jsonl", sweep())
    code = ("import sys; sys.modules['matplotlib'] = None; from parabench.cli import main; "
            f"sys.exit(main(['report', {str(src)!r}, '--out', {str(tmp_path / 'rep')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("parabench: error: the report needs matplotlib: "
                                   "pip install 'parabench[report]'")


def test_scaling_plot_puts_each_point_against_its_own_baseline() -> None:
    """serial at 1 and 2 threads (both 1 worker) are each their own baseline: one point at
    1.0, not a vertical line from 1.0 to the 2-thread rate; ddp 2x1 against serial t=2."""
    pytest.importorskip("matplotlib")
    import dataclasses

    from parabench.sweep.site.plots import scaling_figure

    results = sweep(methods=("serial", "ddp"), workers=(1, 2))
    serial2 = next(r for r in results if r.method == "serial")  # 1 worker, 2 threads
    serial1 = dataclasses.replace(serial2, threads_per_worker=1,
                                  samples_per_s=serial2.samples_per_s / 1.7,
                                  epoch_s=[e * 1.7 for e in serial2.epoch_s])
    ddp2 = next(r for r in results if r.method == "ddp" and r.workers == 2)  # 2 x 1 thread
    cands = candidates([serial1, serial2, ddp2])
    lines = _lines(scaling_figure(cands).axes[0])
    assert list(lines["serial"].get_data()[1]) == [1.0, 1.0]
    [ddp] = [c for c in cands if c.method == "ddp"]
    [s2] = [c for c in cands if c.method == "serial" and c.threads == 2]
    assert lines["ddp"].get_data()[1][0] == pytest.approx(ddp.throughput / s2.throughput)
