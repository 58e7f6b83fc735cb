"""Checks of a whole run before any case starts: bad input fails in a second, not an hour in.

Usage::

    check_timeout(args.timeout)
    check_out("results.jsonl")                       # writable? touches nothing
    check_out_dir("--report", "report")              # a folder: creatable, writable
    check_target(grid)                               # reachable by each workload's metric
    check_data_dirs(grid)                            # every --data-dir given exists
    check_options(grid)                              # every option read by some selection
    check_batch_sizes(grid)                          # no batch larger than the training set
    check_runnable(plan(grid))                       # something would actually run

Each raises :class:`~parabench.config.ConfigError` with one line that says what is wrong and
what is valid; the CLI prints it and exits 2. Inside a sweep, cases that cannot run here
stay ``skipped`` results; only a grid in which *every* case would be skipped is an error,
because a person who asked for exactly that should not get a success code.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from parabench.config import ConfigError
from parabench.registry import methods, option_specs, workloads
from parabench.stopping import ToTarget

if TYPE_CHECKING:
    from parabench.sweep.plan import Case, Grid


def check_timeout(seconds: float) -> None:
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(
            f"--timeout must be > 0 and finite (seconds, e.g. 600), got {seconds!r}"
        )


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_out(out: str | os.PathLike[str]) -> None:
    """Refuse an ``--out`` that could not be appended to, creating and changing nothing."""
    path = Path(out).absolute()
    where = f"--out {out}"
    if path.is_dir():
        raise ConfigError(f"{where} is a directory; give a file path such as {path}/results.jsonl")
    if path.exists():
        try:  # opening without O_CREAT or O_TRUNC changes nothing
            os.close(os.open(path, os.O_RDWR | os.O_APPEND))
        except OSError as exc:
            raise ConfigError(f"{where} cannot be appended to ({exc.strerror}); "
                              "give a writable file") from None
        return
    parent = _nearest_existing(path.parent)
    if not parent.is_dir():
        raise ConfigError(f"{where}: {parent} is a file, not a directory; "
                          "give a path inside a writable directory")
    if (why := _unwritable(parent)) is not None:
        raise ConfigError(f"{where}: cannot create files in {parent} ({why}); "
                          "give a path inside a writable directory")


def _unwritable(directory: Path) -> str | None:
    """Why no file can be created in ``directory``, or None when one can."""
    try:  # the only reliable test (root ignores mode bits; read-only mounts): write a probe
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def check_out_dir(flag: str, out_dir: str | os.PathLike[str] | None) -> None:
    """Refuse a folder option (``--report``, ``--tensorboard``, ``--out-dir``) that could not
    be created or written in, creating nothing: found after an hour of cases, it lost them."""
    if out_dir is None:
        return
    path = Path(out_dir).expanduser().absolute()
    where = f"{flag} {out_dir}"
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{where} is a file, not a directory; give a directory")
    nearest = _nearest_existing(path)
    if not nearest.is_dir():
        raise ConfigError(f"{where}: cannot create it ({nearest} is a file, not a directory)")
    if (why := _unwritable(nearest)) is not None:
        what = "cannot write in it" if nearest == path else "cannot create it"
        raise ConfigError(f"{where}: {what} ({nearest}: {why}); give a writable directory")


def check_target(grid: Grid) -> None:
    """A numeric ``--target-quality`` lies where each selected workload's metric can reach
    (its :attr:`~parabench.workload.Quality.bounds`): 2 on an accuracy is never reached, so
    every case would train its whole epoch cap for a foregone 'not reached'."""
    if not isinstance(grid.stop, ToTarget) or grid.stop.quality is None:
        return  # fixed epochs, or each workload's measured target: in range by construction
    target = grid.stop.quality
    for name in _selected(grid)[1]:
        quality = workloads.get(name).quality
        if quality.bounds is None:
            continue
        low, high = quality.bounds
        if not low < target <= high:
            valid = f"{low:g} < Q <= {high:g}" if math.isfinite(high) else f"Q > {low:g}"
            raise ConfigError(f"--target-quality {target:g} is out of reach for {name}, whose "
                              f"metric is {quality.name}; valid: {valid}")


def check_data_dirs(grid: Grid) -> None:
    """Every ``--data-dir`` given exists, when a selected workload reads it: otherwise each
    case would find out by itself, seconds into loading."""
    readers = [n for n in _selected(grid)[1] if "data_dir" in workloads.get(n).options]
    for value in grid.options.get("data_dir", ()) if readers else ():
        if value is not None and not Path(value).expanduser().exists():
            raise ConfigError(f"--data-dir {value} does not exist (read by "
                              f"{', '.join(readers)}); give the directory or file that "
                              "holds the dataset")


def _selected(grid: Grid) -> tuple[list[str], list[str]]:
    return list(grid.methods or methods.names()), list(grid.workloads or workloads.names())


def readers_of(option: str) -> list[str]:
    """Every registered method and workload that reads ``option``."""
    found = [m.name for m in methods if option in m.options]
    return found + [w.name for w in workloads if option in w.options]


def check_options(grid: Grid) -> None:
    """Every option given is read by at least one selected method or workload."""
    m_names, w_names = _selected(grid)
    readers = {*(o for n in m_names for o in methods.get(n).options),
               *(o for n in w_names for o in workloads.get(n).options)}
    for name in grid.options:
        if name in readers or name not in option_specs():
            continue  # unknown names are RunConfig's error, which lists the valid ones
        flag = "--" + name.replace("_", "-")
        used_by = ", ".join(readers_of(name)) or "nothing registered"
        raise ConfigError(
            f"{flag} applies to none of the selected methods ({', '.join(m_names)}) or "
            f"workloads ({', '.join(w_names)}); it is read by: {used_by}"
        )


def check_batch_sizes(grid: Grid) -> None:
    """A batch larger than the training set is refused (it would silently be clamped)."""
    sizes = [b for b in grid.batch_sizes if isinstance(b, int)]
    if not sizes or any(v is not None for v in grid.options.get("data_dir", ())):
        return  # real data: its size is only known once it is loaded
    for name in _selected(grid)[1]:
        n_train = workloads.get(name).train_size(grid.profile)
        if n_train is not None and (too_big := max(sizes)) > n_train:
            raise ConfigError(
                f"--batch-size {too_big} is larger than {name}'s training set at "
                f"--profile {grid.profile} ({n_train} samples); valid: 1..{n_train}"
            )


def _fixable(case: Case) -> bool:
    """A skip the user can act on (hardware, engines, worker counts, options), as opposed to
    a method that simply does not train that kind of workload."""
    method = methods.get(case.config.method)
    return method.supports(workloads.get(case.config.workload))


def check_runnable(cases: Sequence[Case]) -> None:
    """Refuse a grid in which every case would be skipped; name the reason to fix."""
    if not cases or any(case.skip_reason is None for case in cases):
        return
    ranked = sorted(cases, key=lambda c: not _fixable(c))  # a fixable reason first
    first = ranked[0]
    others = len(_distinct(c.skip_reason for c in cases)) - 1
    more = f" (and {others} other reason(s))" if others > 0 else ""
    reason = " ".join(str(first.skip_reason).split())  # one line
    raise ConfigError(
        f"nothing to run: every case would be skipped; {first.config.label()}: {reason}{more}"
    )


def _distinct(reasons: Iterable[str | None]) -> set[str]:
    return {r for r in reasons if r}
