"""The per-machine cost history: one compact line per case a sweep ran, for the dry run's model.

Usage::

    row = cost_row(results[0])          # the case's identity, wall time, its parts and counts
    problem = append_costs(results[0])  # None once written (cache_dir()/costs.jsonl)
    mine = [r for r in read_costs() if r["machine"] == this_machine()]
    [row_values(r) for r in mine]       # each line's per-unit costs that speak for today

:func:`parabench.sweep.run.run_grid` appends every ok result that has ``wall_parts`` to
``cache_dir()/costs.jsonl`` (:func:`parabench.cache.cache_dir`; ``PARABENCH_CACHE_DIR=off``
keeps none). A line holds the case's identity (workload, method, device, workers, threads,
profile, batch, epochs, target, seed), the machine it ran on (:func:`machine_key`: CPU model,
cores, GPU names, from the result's ``env``), ``wall_s`` and ``wall_parts``, and the counts
the parts are divided by: epochs trained (fractional where the run stopped between an epoch's
parts), evaluations, evaluations per epoch and the epoch from which they were between parts,
windows, and where the target was reached. :mod:`parabench.sweep.costmodel` fits to it.

:func:`row_values` divides a line's parts by its counts, leaving out what the line cannot say
of a case planned today: its start-up where it started the other way (forked from a
pre-started interpreter or plainly, :func:`parabench.case.isolate.forks`), its windows under
another window rule.

Writing never fails a sweep: :func:`append_costs` returns what went wrong (the runner prints
it once). The file keeps the newest :data:`KEEP` lines once it grows past :data:`CAP`.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from parabench.cache import cache_dir
from parabench.case.isolate import forks, forks_ranks
from parabench.case.result import Result
from parabench.case.windows import rule_id, window_target_s
from parabench.identity import math_options

FILE = "costs.jsonl"
#: past this many lines the file is cut back to the newest KEEP
CAP = 10_000
KEEP = 5_000


def machine_key(env: dict[str, Any] | None) -> str:
    """``"<cpu model> | <cores> cores | <gpu names>"`` of a result's ``env`` (its
    :func:`parabench.envinfo.fingerprint`); "" when the env names no CPU."""
    env = env or {}
    if not env.get("cpu"):
        return ""
    gpus = ", ".join(env.get("gpus") or []) or "no gpu"
    return f"{env['cpu']} | {env.get('cores')} cores | {gpus}"


def this_machine() -> str:
    """:func:`machine_key` of the machine this runs on."""
    from parabench.envinfo import fingerprint

    return machine_key(fingerprint())


def history_path() -> Path | None:
    """Where the history lives; None when the cache is off."""
    root = cache_dir()
    return None if root is None else root / FILE


def cost_row(r: Result) -> dict[str, Any] | None:
    """The history line of ``r``; None unless it finished ok with ``wall_parts``."""
    if r.status != "ok" or not r.wall_parts or not r.wall_s:
        return None
    ttt = r.time_to_target
    config = r.config or {}
    trained = float(len(r.epoch_s))
    if ttt is not None and ttt.stopped_at is not None:
        trained = float(ttt.stopped_at)  # the last epoch was partial
    evals = (len(ttt.eval_samples) if ttt is not None
             else int(r.wall_parts.get("evaluate", 0.0) > 0))
    return {
        "t": r.timestamp, "machine": machine_key(r.env), "cores": (r.env or {}).get("cores"),
        "workload": r.workload, "method": r.method, "device": r.device, "workers": r.workers,
        "threads": r.threads_per_worker, "profile": r.profile,
        "batch": config.get("batch_size"), "epochs": r.epochs, "seed": r.seed,
        "target": config.get("target_quality"),
        "math": sorted(k for k in (config.get("options") or {}) if k in math_options()),
        "wall_s": round(r.wall_s, 4),
        "parts": {k: round(v, 4) for k, v in r.wall_parts.items()},
        "epochs_run": len(r.epoch_s), "trained": round(trained, 4), "evals": evals,
        "per_epoch": ttt.evals_per_epoch if ttt is not None else None,
        "mid_from": ttt.mid_epoch_from if ttt is not None else 0,
        "reach": (ttt.epochs_to_target if ttt is not None and ttt.reached else None),
        "held": ttt.converged_epochs if ttt is not None else None,
        "crossing": bool(config.get("eval_from")),
        "evals_sparse": True,  # held epochs and epochs before a crossing not evaluated
        "windows": len(r.window_s),
        "window_rule": rule_id(r.window.target_s, r.window.asked) if r.window else None,
        # windows that were parts trained for quality (Method.windows_from_training)
        "windows_trained": r.window.from_training if r.window else 0,
        # forked from a pre-started interpreter: its imports, outside the case (None: fresh)
        "prestart_s": r.facts.prestart_import_s,
        "ranks_forked": r.facts.ranks_forked,  # a pool's ranks forked (core.rankfork)
        "samples_per_epoch": r.samples_per_epoch,
        "samples_per_s": r.samples_per_s, "status": r.status,
    }


def append_costs(result: Result, path: Path | None = None) -> str | None:
    """Append ``result``'s line (:func:`cost_row`) to the history, cutting the file back to
    the newest :data:`KEEP` lines past :data:`CAP`. None when written or nothing to write;
    otherwise why not, in words (never raises: a sweep does not fail for it)."""
    try:
        row = cost_row(result)
        path = path or history_path()
        if row is None or path is None:
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(row, separators=(",", ":"), default=str) + "\n").encode()
        lock = os.open(path.with_name(path.name + ".lock"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one sweep's cut-back never loses another's line
            with path.open("ab") as f:
                f.write(line)
                size = f.tell()
            if size > CAP * 200:  # cheap first: a line is some 700 bytes
                _cut_back(path)
        finally:
            os.close(lock)  # releases the lock
    except Exception as exc:  # noqa: BLE001 - the history is a help, never a sweep's fate
        return f"{type(exc).__name__}: {exc}"
    return None


def _cut_back(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    if len(lines) <= CAP:
        return
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".jsonl")
    with os.fdopen(fd, "wb") as f:
        f.writelines(lines[-KEEP:])
    os.replace(tmp, path)


def read_costs(path: Path | None = None) -> Iterator[dict[str, Any]]:
    """The history's lines (a torn or foreign line is skipped); none without a file."""
    path = path or history_path()
    if path is None:
        return
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if usable(row):
            yield row


def usable(row: Any) -> bool:
    """Whether ``row`` has what the model reads: names, parts and a wall time above 0."""
    return (isinstance(row, dict) and isinstance(row.get("parts"), dict)
            and all(isinstance(row.get(k), str) for k in ("machine", "workload", "method"))
            and isinstance(row.get("wall_s"), int | float) and row["wall_s"] > 0
            and all(isinstance(v, int | float) for v in row["parts"].values()))


def merged(*sources: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of all ``sources``, each case once (a result in both ``--out`` and the
    history is one case: the same timestamp, case and wall time)."""
    seen, out = set(), []
    for rows in sources:
        for row in rows:
            key = (row.get("t"), row.get("workload"), row.get("method"), row.get("workers"),
                   row.get("threads"), row.get("wall_s"))
            if key not in seen:
                seen.add(key)
                out.append(row)
    return out


def _started_as_today(row: dict[str, Any]) -> bool:
    """Whether ``row``'s case started as today's would: forked or fresh, and a pool's ranks
    forked or spawned (None: it started no pool; a row from before ranks could fork has no
    such key, and its ranks, if any, were spawned)."""
    workload, method = row["workload"], row["method"]
    if (row.get("prestart_s") is not None) != forks(workload, method):
        return False
    ranks = forks_ranks(workload, method, row.get("device") or "cpu")
    if "ranks_forked" not in row:
        return not ranks
    return row["ranks_forked"] is None or row["ranks_forked"] == ranks


def _windows_as_today(row: dict[str, Any]) -> bool:
    """Whether ``row``'s speed windows were trained as today's would be: a row from before
    windows could be parts trained for quality has no ``windows_trained``, and where its
    method's windows are such parts today (a case with a target), its windows cost more than
    today's."""
    from parabench.registry import methods

    if "windows_trained" in row or row.get("target") is None or row["method"] not in methods:
        return True
    return not methods.get(row["method"]).windows_from_training


def row_values(row: dict[str, Any]) -> dict[str, float]:
    """Each component's per-unit cost in ``row`` (those it has units of)."""
    parts = row["parts"]
    train, evaluate, windows = (float(parts.get(k, 0.0)) for k in ("train", "evaluate",
                                                                    "windows"))
    out: dict[str, float] = {}
    if _started_as_today(row):
        # a forked case's start-up has no imports in it, nor have forked ranks: rows started
        # another way say nothing of how today's case starts
        out["fixed"] = float(row["wall_s"]) - train - evaluate - windows
    if row.get("window_rule") == rule_id(window_target_s(), None) and _windows_as_today(row):
        out["windows"] = windows  # rows of another window rule say nothing of today's
    if (row.get("trained") or 0) > 0:
        out["train"] = train / row["trained"]
    if (row.get("evals") or 0) > 0:
        out["evaluate"] = evaluate / row["evals"]
    if row.get("target") is not None and row.get("reach") is not None:
        out["reach"] = float(row["reach"])
    if row.get("per_epoch"):
        out["per_epoch"] = float(row["per_epoch"])
    return out
