"""Measure the regression gate: false alarms on A/A comparisons, detection of injected slowdowns.

Usage::

    PYTHONPATH=src python scripts/gate_harness.py --small              # minutes: a smoke run
    PYTHONPATH=src python scripts/gate_harness.py --mode file,interleaved --count 50 \\
        --detect-count 20 --rounds 5                                    # quiet machine, hours
    PYTHONPATH=src python scripts/gate_harness.py --mode file,interleaved --count 50 \\
        --detect-count 20 --rounds 5 --load                             # the same, under load
    PYTHONPATH=src python scripts/gate_harness.py --mode asv --count 10   # asv continuous A/A
    PYTHONPATH=src python scripts/gate_harness.py --table-only          # rewrite the table

Modes (each comparison runs the selection, ``--selection``, on both sides and judges every case
in it: by default ``SELECTION``, mlp under the test plugin's ``serial_slow``, tiny, one epoch; a
selection of several cases gives several case comparisons per run pair):

* ``file``: ``parabench run --out a.jsonl``, then ``parabench run --out b.jsonl``, judged by
  :func:`parabench.analysis.compare.compare` (what ``parabench compare a.jsonl b.jsonl`` says
  and exits on).
* ``interleaved``: ``parabench compare --rerun HEAD HEAD --rounds R`` through its functions
  (:mod:`parabench.sweep.rerun`): A = B = this checkout's HEAD, in two worktrees.
* ``asv`` (optional, slow): the ``asv-gate`` workflow's command, ``asv continuous
  --interleave-rounds -a rounds=4 -b ASV_BENCH`` of HEAD against an empty commit on top of it
  (same code, another hash) in a clone, with asv's configured environment (virtualenv: asv
  builds and installs the commits, so pip must reach the dependencies, or their wheels be
  cached; ``--interleave-rounds`` refuses ``-E existing``). One record per benchmark parameter
  set; a false alarm is one asv marks ``+`` (slower: it then prints "PERFORMANCE DECREASED"
  and exits 1). A/A only.

Slowdowns are real extra work on the NEW side (``tests/plugins/slow_steps.py``:
``PARABENCH_SLOW_FRACTION``, a busy loop for that fraction of every training iteration's own
wall time, so the case's samples/s falls to 1 / (1 + f)); the recorded figures are never
edited. Records keep the plant (``settings["plant"]``) and the table shows it. A/A
(slowdown 0) gives the false-alarm rate, 5 / 10 / 20 % the detection rates. ``--load``
starts one spinning process per core for the whole run (the condition is recorded as
``load``, else ``quiet``).

Every comparison appends one JSON line per case to ``OUT/gate_records.jsonl`` (mode,
condition, slowdown, index, case, verdict, regressed, ratio, p, samples, seconds, load
before/after, date, command, commit) and the table ``OUT/gate_table.md`` is rewritten from all
records after each one, so a run can be stopped and resumed: comparisons already recorded are
skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gate_asv import ASV_BENCH, asv_twin, run_asv  # noqa: E402  (scripts/)

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "tests" / "plugins"
SELECTION = ["--workload", "mlp", "--method", "serial_slow", "--profile", "tiny",
             "--epochs", "1"]
SLOWDOWNS = (0.05, 0.10, 0.20)
RECORDS, TABLE = "gate_records.jsonl", "gate_table.md"
#: what a slowdown of f stretches (``settings["plant"]``): "iteration", each training
#: iteration's wall time (tests/plugins/slow_steps.py); records without it were taken with the
#: first plant, f of each step's CPU seconds on the training thread ("step"), which cost mlp
#: and nbow, whose batch handling is a large share of an iteration, only about 6 % at f = 10 %
PLANT = "iteration"
DEFAULT_OUT = ROOT / "docs" / "gate"


def load_text() -> str:
    """``uptime``'s load averages (1, 5, 15 min)."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plant(r: Mapping[str, Any]) -> str:
    """The plant a record's slowdown went through ("-" for A/A, where there is none)."""
    if float(r["slowdown"]) == 0:
        return "-"
    settings = r.get("settings")
    return settings.get("plant", "step") if isinstance(settings, dict) else "step"


def mode_label(r: Mapping[str, Any]) -> str:
    """The mode, and for interleaved records the test that judged them: records from before
    the sign-flip test have no "test" and were judged by the prior t test."""
    if r["mode"] != "interleaved":
        return r["mode"]
    test = r.get("test") or "t"
    return f"interleaved, {'t test' if test == 't' else 'sign-flip'}"


def record_key(r: Mapping[str, Any]) -> tuple:
    return (r["mode"], r["condition"], float(r["slowdown"]), int(r["index"]), plant(r))


def _slowdown_label(slowdown: float, how: str) -> str:
    if slowdown == 0:
        return "none (A/A)"
    return f"{slowdown:.0%} of each {how}" + (" (first plant)" if how == "step" else "")


def append_record(path: Path, record: Mapping[str, Any]) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(record) + "\n")


def table(records: Iterable[Mapping[str, Any]]) -> str:
    """The markdown table: one row per mode x condition x slowdown, with counts."""
    records = list(records)
    groups: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for r in records:
        groups[(mode_label(r), r["condition"], float(r["slowdown"]), plant(r))].append(r)
    lines = ["| mode | condition | injected slowdown | rate | case comparisons (run pairs) "
             "| median new/base | load before -> after (1 min) | dates |",
             "|---|---|---|---|---|---|---|---|"]
    for (mode, condition, slowdown, how), rs in sorted(groups.items()):
        hits = sum(bool(r["regressed"]) for r in rs)
        what = "false alarms" if slowdown == 0 else "detected"
        ratios = sorted(r["ratio"] for r in rs if r.get("ratio") is not None)
        median = f"{ratios[len(ratios) // 2]:.3f}" if ratios else "-"
        before = [float(r["load_before"].split()[0]) for r in rs]
        after = [float(r["load_after"].split()[0]) for r in rs]
        days = sorted({r["date"][:10] for r in rs})
        lines.append(
            f"| {mode} | {condition} | {_slowdown_label(slowdown, how)} "
            f"| {what} {hits / len(rs):.0%} | {hits}/{len(rs)} "
            f"({len({r['index'] for r in rs})}) | {median} "
            f"| {min(before):.2f}-{max(before):.2f} -> {min(after):.2f}-{max(after):.2f} "
            f"| {days[0]}{'..' + days[-1] if len(days) > 1 else ''} |")
    commands = sorted({r["command"] for r in records})
    settings = sorted({json.dumps(r["settings"], sort_keys=True) for r in records})
    return "\n".join(
        ["# Regression gate: false-alarm and detection rates", "",
         f"Written by `scripts/gate_harness.py` from {len(records)} record(s) in {RECORDS} "
         "(one line per comparison; `--table-only` rewrites this file from them).", "",
         *lines, "", "Commands:", "", *(f"    {c}" for c in commands), "",
         "Settings:", "", *(f"    {s}" for s in settings), ""])


def write_table(out: Path) -> Path:
    path = out / TABLE
    path.write_text(table(read_records(out / RECORDS)))
    return path


@contextmanager
def background_load(on: bool) -> Iterator[list[int]]:
    """One busy process per core while the block runs (``--load``); killed by pid after."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(os.cpu_count() or 1)] if on else []
    try:
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
            p.wait()


def _env(slowdown: float, windows: Mapping[str, str]) -> dict[str, str]:
    return {"PARABENCH_PLUGINS": "slow_steps", "PARABENCH_SLOW_FRACTION": str(slowdown),
            **windows}


def _case_label(change: Any) -> str:
    key = change.key  # (workload, method, device, workers, batch, profile, options, threads)
    return f"{key[0]}/{key[1]} {key[3]}x{key[7]}"


def _judge(base: list, new: list, threshold: float, *, paired: bool = False
           ) -> list[dict[str, Any]]:
    """One verdict per case the two sides matched (``case``: its label), as compare says it
    (``paired``: by round, as ``compare --rerun`` judges)."""
    from parabench.analysis.compare import compare

    cmp = compare(base, new, threshold, paired=paired)
    if not cmp.changes:
        return [{"case": "-", "verdict": "no matched case", "regressed": False, "ratio": None,
                 "p": None, "samples": ""}]
    return [{"case": _case_label(c), "verdict": c.verdict, "regressed": c.regressed,
             "ratio": c.ratio, "p": c.p_value, "samples": c.samples,
             "test": c.estimate.test if c.estimate else None,
             "round_ratios": _round_ratios(c.key, base, new) if paired else None}
            for c in cmp.changes]


def _round_ratios(key: tuple, base: list, new: list) -> list[float | None]:
    """NEW's samples/s / BASE's in each round, for one case (what calibrates a paired prior);
    None for a round where either side has no figure."""
    from parabench.identity import CaseId

    def rates(side: list) -> list[float | None]:
        return [r.samples_per_s if r.status == "ok" else None for r in side
                if CaseId.recorded(r).work == key]

    return [round(n / b, 5) if n and b else None
            for b, n in zip(rates(base), rates(new), strict=False)]


def run_file(work: Path, slowdown: float, args: argparse.Namespace,
             windows: Mapping[str, str]) -> list[dict[str, Any]]:
    from parabench.case.result import read_results
    from parabench.sweep.rerun import side_env

    files = {}
    for side, fraction in (("base", 0.0), ("new", slowdown)):
        files[side] = work / f"{side}.jsonl"
        files[side].unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "parabench", "run", *args.selection_list,
               "--repeats", str(args.repeats), "--out", str(files[side])]
        env = side_env(ROOT, _env(fraction, windows))
        with open(work / f"{side}.log", "w") as log:
            subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    return _judge(list(read_results(files["base"])), list(read_results(files["new"])),
                  args.threshold)


def run_interleaved(work: Path, slowdown: float, args: argparse.Namespace,
                    windows: Mapping[str, str], trees: Mapping[str, Path]
                    ) -> list[dict[str, Any]]:
    from parabench.sweep.rerun import run_rounds

    rounds = run_rounds(trees, args.selection_list, rounds=args.rounds, out_dir=work,
                        env={"base": _env(0.0, windows), "new": _env(slowdown, windows)},
                        say=lambda line: None, progress=False)
    return _judge(rounds.base_results(), rounds.new_results(), args.threshold, paired=True)


def plan(args: argparse.Namespace) -> list[tuple[str, float, int]]:
    out = []
    for mode in args.modes:
        slowdowns = [0.0] + ([] if mode == "asv" else list(args.slowdowns))
        for slowdown in slowdowns:
            n = args.count if slowdown == 0 else args.detect_count
            out.extend((mode, slowdown, i) for i in range(n))
    return out


def pending(todo: Iterable[tuple[str, float, int]], done: set[tuple], condition: str
            ) -> list[tuple[str, float, int]]:
    """The planned comparisons not yet recorded under ``condition`` with today's plant (a
    slowdown recorded through the first plant is measured again)."""
    return [t for t in todo if record_key({"mode": t[0], "condition": condition, "slowdown": t[1],
                                           "index": t[2], "settings": {"plant": PLANT}})
            not in done]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", default="file,interleaved",
                   help="comma list of file, interleaved, asv (default: file,interleaved)")
    p.add_argument("--count", type=int, default=50,
                   help="A/A comparisons per mode (50); each judges every case of the selection")
    p.add_argument("--detect-count", type=int, default=20,
                   help="comparisons per injected slowdown and mode (20)")
    p.add_argument("--slowdowns", default="0.05,0.10,0.20", help="fractions (0.05,0.10,0.20)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (5)")
    p.add_argument("--repeats", type=int, default=1, help="file mode: repeats per side (1)")
    p.add_argument("--threshold", type=float, default=0.10, help="compare's threshold (0.10)")
    p.add_argument("--selection", default=shlex.join(SELECTION),
                   help="parabench run arguments of the case judged")
    p.add_argument("--asv-bench", default=ASV_BENCH, help="asv -b regex for --mode asv")
    p.add_argument("--asv-rounds", type=int, default=4, help="asv -a rounds=N (4)")
    p.add_argument("--window-s", type=float, default=None,
                   help="seconds per speed window (PARABENCH_WINDOW_S; default parabench's)")
    p.add_argument("--load", action="store_true", help="spin one process per core meanwhile")
    p.add_argument("--small", action="store_true",
                   help="a smoke run: 2 A/A + 1 per slowdown (20 %% only), 2 rounds, short "
                        "speed windows")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"default {DEFAULT_OUT}")
    p.add_argument("--table-only", action="store_true", help="rewrite the table, run nothing")
    args = p.parse_args(argv)
    args.modes = [m for m in args.mode.split(",") if m]
    bad = set(args.modes) - {"file", "interleaved", "asv"}
    if bad:
        p.error(f"unknown mode(s) {', '.join(sorted(bad))}; valid: file, interleaved, asv")
    args.slowdowns = [float(s) for s in args.slowdowns.split(",") if s]
    if args.small:
        args.count, args.detect_count, args.rounds, args.slowdowns = 2, 1, 2, [0.20]
    args.selection_list = shlex.split(args.selection)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.table_only:
        print(write_table(args.out).read_text())
        return 0
    sys.path.insert(0, str(ROOT / "src"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(PLUGINS), os.environ.get("PYTHONPATH", "")) if p)
    from parabench.sweep.rerun import checkouts, resolve_ref

    windows = ({"PARABENCH_WINDOWS": "2", "PARABENCH_WINDOW_S": "0.05"} if args.small else
               {"PARABENCH_WINDOW_S": str(args.window_s)} if args.window_s else {})
    condition = "load" if args.load else "quiet"
    command = "python scripts/gate_harness.py " + shlex.join(sys.argv[1:] if argv is None
                                                              else argv)
    head = resolve_ref(ROOT, "HEAD")
    settings = {"selection": args.selection, "rounds": args.rounds, "repeats": args.repeats,
                "threshold": args.threshold, "windows": windows or "default", "plant": PLANT}
    done = {record_key(r) for r in read_records(args.out / RECORDS)}
    todo = pending(plan(args), done, condition)
    print(f"gate harness: {len(todo)} comparison(s) to run ({len(done)} recorded), "
          f"{condition}, records in {args.out / RECORDS}", flush=True)
    needs_trees = any(mode == "interleaved" for mode, _, _ in todo)
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="gate-"))
        trees = stack.enter_context(
            checkouts(ROOT, {"base": head, "new": head} if needs_trees else {}))
        twin = (stack.enter_context(asv_twin(Path(scratch)))
                if any(mode == "asv" for mode, _, _ in todo) else None)
        stack.enter_context(background_load(args.load))
        for n, (mode, slowdown, index) in enumerate(todo, start=1):
            work = Path(scratch) / f"{mode}-{slowdown}-{index}"
            work.mkdir()
            before, started = load_text(), time.monotonic()
            if mode == "file":
                verdicts = run_file(work, slowdown, args, windows)
            elif mode == "interleaved":
                verdicts = run_interleaved(work, slowdown, args, windows, trees)
            else:
                verdicts = run_asv(work, args, twin)
            common = {"mode": mode, "condition": condition, "slowdown": slowdown,
                      "index": index, "seconds": round(time.monotonic() - started, 1),
                      "load_before": before, "load_after": load_text(),
                      "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                      "command": command, "commit": head[:12], "settings": settings}
            for verdict in verdicts:
                append_record(args.out / RECORDS, {**common, **verdict})
            write_table(args.out)
            said = "; ".join(f"{v['case']}: {v['verdict']}" for v in verdicts)
            print(f"[{n}/{len(todo)}] {mode} {condition} slowdown {slowdown:.0%} #{index} "
                  f"({common['seconds']} s, load {common['load_after']}): {said}", flush=True)
    print(f"table: {write_table(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
