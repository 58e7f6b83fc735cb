"""``parabench calibrate``: measure serial for time-to-quality mode, into a targets store.

Usage::

    parabench calibrate --workload cnn --profile tiny [--seeds 3] [--max-epochs 8]
                        [--data-dir DIR] [--device cpu] [--targets FILE] [--dry-run]
                        [--train-seed-offset K] [--paired]

Runs serial once per seed (:mod:`parabench.sweep.calibrate`) and writes the entry (target,
epoch budget from the curves' plateau, samples to the target per seed, the converged
reference) to the store ``--targets FILE``, by default the per-user one
(:func:`parabench.workloads.targetstore.user_store`), replacing the entry for the same code,
data and device. ``parabench run --target-quality [--targets FILE]`` then uses it. A progress
line per seed says its quality and an ETA; finished seeds are kept in ``FILE.partial.json``
as they end, so Ctrl-C loses only the running seed and the same command resumes. After it, the
power the chosen number of seeds gives. ``--dry-run`` estimates the cost and runs nothing.
``--train-seed-offset K`` trains seed s's data with training seed s + K (other initial weights,
sample order): a second store calibrated so beside one at offset 0 measures how far two sound
runs of the same data differ (``scripts/paired_spread.py --stores A B``). ``--paired`` does
both in one store: each seed's data trained at training seeds s and s + 1000 (twice the cost),
the entry keeping the spread of their differences; a statistical run at one of the seeds is
then judged against serial's quality at its own seed within 3 x that spread (``ok, blind <L
(paired by seed)``), which leaves the data draw's share of the spread out.
"""

from __future__ import annotations

import argparse
import itertools
import os
import shlex
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

from parabench.cli.common import EXIT_OK, UsageError
from parabench.cli.types import choice, positive_int
from parabench.config import DEVICES, PROFILES


def add_parser(sub: argparse._SubParsersAction) -> None:
    from parabench.sweep.calibrate import MAX_EPOCHS, PAIR_OFFSET

    p = sub.add_parser("calibrate", help="measure serial's target, epoch budget and power for "
                                         "time-to-quality mode (a targets store)")
    p.add_argument("--workload", required=True, help="one workload")
    p.add_argument("--profile", type=choice(PROFILES), default="tiny",
                   help="tiny, quick, full (default: tiny)")
    p.add_argument("--seeds", type=positive_int, default=3,
                   help="seeds 0..N-1 (default 3); more cost more and narrow the stated power")
    p.add_argument("--max-epochs", type=positive_int, default=MAX_EPOCHS,
                   help=f"most epochs a seed trains; the budget is where serial's curves "
                        f"plateau within it (default {MAX_EPOCHS})")
    p.add_argument("--data-dir", default=None, metavar="DIR",
                   help="the workload's own data (fingerprinted: an entry is for these files)")
    p.add_argument("--device", type=choice(DEVICES), default="cpu", help="default: cpu")
    p.add_argument("--timeout", type=float, default=1800.0, help="per seed, seconds")
    p.add_argument("--train-seed-offset", type=positive_int, default=None, metavar="K",
                   help="train seed s's data with training seed s + K (initial weights, "
                        "sample order): beside a store at offset 0, the paired spread")
    p.add_argument("--paired", action="store_true",
                   help="train each seed's data twice (training seeds s and s + "
                        f"{PAIR_OFFSET}) and store the spread of the differences: a run at "
                        "one of these seeds is then judged paired by seed (twice the cost)")
    add_targets_flag(p)
    p.add_argument("--dry-run", action="store_true",
                   help="estimate the cost from the dry run's cost model; run nothing")


def add_targets_flag(p: argparse.ArgumentParser) -> None:
    """``--targets FILE``: calibrate's store, and the first ``run`` looks a target up in."""
    p.add_argument("--targets", metavar="FILE", default=None,
                   help="the targets store (default: targets.json in the per-user cache "
                        "directory, $PARABENCH_CACHE_DIR or ~/.cache/parabench)")


def calibration_hints(args: argparse.Namespace, profile_of: Callable[[Any], str]) -> None:
    """``--target-quality`` with each workload's default target: ``--targets FILE`` is set for
    the cases (:data:`parabench.workloads.targetstore.ENV`); a workload no store nor the shipped
    table has an entry for gets the ``parabench calibrate`` command that would make one and its
    time as its ``--dry-run`` estimates it, printed where it runs on to its fallback target,
    exit 2 where it has none."""
    from parabench.registry import workloads
    from parabench.stopping import ToTarget
    from parabench.sweep.calibrate import calibration_s
    from parabench.sweep.dryrun import _clock
    from parabench.workloads.quality_targets import missing_reason, quality_target

    named_store(args)
    if not isinstance(args.target_quality, ToTarget) or args.target_quality.quality is not None:
        return
    given = getattr(args, "opt_data_dir", None)
    profile = profile_of(args)
    for name in args.workload or workloads.names():
        wl = workloads.get(name)
        data_dirs = (given if isinstance(given, list) else [given]) if (
            given and "data_dir" in wl.options) else [None]
        for data_dir, device in itertools.product(data_dirs, args.device or [None]):
            if quality_target(name, profile, data_dir, device) is not None:
                continue
            seconds, guessed = calibration_s(name, profile, 3, data_dir=data_dir)
            hint = (f"{missing_reason(name, profile, data_dir, device)} (about "
                    f"{_clock(seconds)}, {'partly guessed' if guessed else 'estimated'})")
            if wl.reference_quality is None:
                raise UsageError(f"{hint}; then run this again, or give --target-quality Q")
            print(f"parabench: {hint}; this run trains {name} to the fallback target "
                  "(0.97 x its quick reference)", flush=True)


def named_store(args: argparse.Namespace) -> Path | None:
    """The store ``--targets`` names (None: none), set for the case processes too
    (:data:`parabench.workloads.targetstore.ENV`): the cases look their targets up there."""
    from parabench.workloads.targetstore import ENV

    if not args.targets:
        return None
    path = Path(args.targets).expanduser().resolve()
    os.environ[ENV] = str(path)
    return path


def targets_path(args: argparse.Namespace) -> Path:
    """The store ``--targets`` names, else the user store."""
    from parabench.workloads.targetstore import user_store

    if (path := named_store(args)) is not None:
        return path
    if (path := user_store()) is None:
        raise UsageError("the cache is off (PARABENCH_CACHE_DIR=off): give --targets FILE")
    return path


def cmd_calibrate(args: argparse.Namespace) -> int:
    from parabench.registry import workloads
    from parabench.sweep.calibrate import measure, planned_cases, power_lines
    from parabench.sweep.dryrun import describe_plan
    from parabench.workloads.targetstore import write_entry

    workloads.get(args.workload)  # an unknown name: exit 2, listing the valid ones
    if args.data_dir and not Path(args.data_dir).expanduser().exists():
        raise UsageError(f"--data-dir {args.data_dir} does not exist")
    if args.train_seed_offset and not args.targets:
        raise UsageError("--train-seed-offset measures a second calibration, to set beside one "
                         "at offset 0: give it its own --targets FILE, so that it does not "
                         "replace the entry in the user store")
    if args.paired and args.seeds < 2:
        raise UsageError("--paired needs --seeds 2 or more: the paired spread is the standard "
                         "deviation of the seeds' differences")
    store = targets_path(args)
    seeds = list(range(args.seeds))
    if args.dry_run:
        print(describe_plan(planned_cases(args.workload, args.profile, seeds, args.max_epochs,
                                          args.data_dir, args.device, args.timeout,
                                          args.paired), []))
        return EXIT_OK
    partial = store.with_name(store.name + ".partial.json")
    print(f"calibrating {args.workload} at {args.profile}: serial, {args.seeds} seed(s)"
          f"{', each at two training seeds' if args.paired else ''}, "
          f"{_each(args.workload, args.max_epochs)}", flush=True)
    entry = measure(args.workload, args.profile, seeds, args.max_epochs,
                    timeout_s=args.timeout, data_dir=args.data_dir, device=args.device,
                    partial=partial, say=lambda line: print(line, flush=True),
                    train_offset=args.train_seed_offset or 0, paired=args.paired)
    entry.update(command=_command(args), date=date.today().isoformat(), machine=_machine())
    write_entry(store, args.workload, args.profile, entry)
    _forget_partial(partial, args, entry["max_epochs"])
    print(f"{args.workload} {args.profile}: target {entry['target']:.4g} "
          f"(p{entry['percentile']} after {entry['epochs']} epoch(s): {entry['budget_rule']}); "
          f"written to {store}")
    print("\n".join(power_lines(entry, str(store))))
    return EXIT_OK


def _command(args: argparse.Namespace) -> str:
    """The calibration's command line, as its arguments say it."""
    parts = ["parabench calibrate", f"--workload {args.workload}", f"--profile {args.profile}",
             f"--seeds {args.seeds}", f"--max-epochs {args.max_epochs}"]
    parts += [f"--data-dir {shlex.quote(args.data_dir)}"] if args.data_dir else []
    parts += [f"--device {args.device}"] if args.device != "cpu" else []
    parts += [f"--targets {shlex.quote(args.targets)}"] if args.targets else []
    offset = args.train_seed_offset
    parts += [f"--train-seed-offset {offset}"] if offset else []
    parts += ["--paired"] if args.paired else []
    return " ".join(parts)


def _machine() -> dict[str, object]:
    from parabench.envinfo import fingerprint

    env = fingerprint()
    return {k: env.get(k) for k in ("host", "cpu", "cores", "ram_gb", "gpus", "torch")}


def _forget_partial(partial: Path, args: argparse.Namespace, epochs: int) -> None:
    """Drop this calibration's finished seeds from the partial file (the entry holds them)."""
    from parabench.sweep.calibrate import PAIR_OFFSET, partial_key
    from parabench.workloads.targetstore import read_store, write_json

    everything = read_store(partial)
    offset = args.train_seed_offset or 0
    for off in [offset] + ([offset + PAIR_OFFSET] if args.paired else []):
        everything.pop(partial_key(args.workload, args.profile, args.data_dir, args.device,
                                   epochs, off), None)
    if everything:
        write_json(partial, {"about": "parabench calibrate: finished seeds",
                             "entries": everything})
    else:
        partial.unlink(missing_ok=True)


def _each(workload: str, max_epochs: int) -> str:
    """What each seed trains: an estimator fits once, whatever ``--max-epochs`` says."""
    from parabench.registry import workloads

    if not workloads.get(workload).epochs_improve:
        return "one fit each (an estimator: --max-epochs does not apply)"
    return f"at most {max_epochs} epoch(s) each"
