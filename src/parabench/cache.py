"""An on-disk cache for deterministic figures that cost seconds to make in every fresh case.

Usage::

    arrays = cached_arrays("tabular", {"n_samples": 1000, "seed": 0}, make, sources=[__file__])
    flops = cached_json("flops", {"model": repr(model)}, count, sources=[model_file])

Every case runs in a fresh process, and before this cache each paid, inside its timed start-up,
for work whose answer never changes between runs: importing scikit-learn to draw the same
seeded tabular data and ``torch.utils.flop_counter``, whose first use imports TorchDynamo,
to count the same model's FLOPs (what each cost: docs/measurements.md). The default run starts
~40 cases.

An entry's name is a hash of the caller's key, the versions it lists and the source files that
compute it (so editing the generator or the model's code misses, never reads a stale answer).
Entries are written to a temporary name and renamed, so ranks racing on one key each read a
whole file; an unreadable entry is recomputed and rewritten. ``PARABENCH_CACHE_DIR`` moves the
cache (default ``$XDG_CACHE_HOME/parabench``, else ``~/.cache/parabench``); ``off`` turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

#: bump when the format of an entry changes
FORMAT = 1


def cache_dir() -> Path | None:
    """Where entries live; None when ``PARABENCH_CACHE_DIR=off``."""
    configured = os.environ.get("PARABENCH_CACHE_DIR", "")
    if configured.lower() == "off":
        return None
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "parabench"


def entry_name(kind: str, key: dict[str, Any], sources: Iterable[str | Path] = ()) -> str:
    """``kind-<sha256>``: of the key (JSON, sorted) and the bytes of every source file."""
    h = hashlib.sha256(json.dumps([FORMAT, kind, key], sort_keys=True, default=str).encode())
    for source in sorted({str(s) for s in sources}):
        h.update(source.encode())
        h.update(Path(source).read_bytes())
    return f"{kind}-{h.hexdigest()[:32]}"


def _write(path: Path, write: Callable[[Any], None]) -> None:
    """Write through a temporary file in the same folder, then rename (atomic)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full cache only costs the next case the same work


def _cached(kind: str, key: dict[str, Any], make: Callable[[], Any], sources: Iterable[str | Path],
            suffix: str, read: Callable[[Path], Any], dump: Callable[[Any, Any], None]) -> Any:
    """``make()``'s value, read from the entry for the key when it exists, else made and
    written (``dump(value, file)``); an absent or damaged entry is made again."""
    root = cache_dir()
    if root is None:
        return make()
    path = root / f"{entry_name(kind, key, sources)}{suffix}"
    try:
        return read(path)
    except (OSError, ValueError, EOFError, KeyError):
        pass  # absent or damaged: computed again below
    value = make()
    _write(path, lambda f: dump(value, f))
    return value


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        return {name: z[name] for name in z.files}


def cached_arrays(kind: str, key: dict[str, Any], make: Callable[[], dict[str, np.ndarray]],
                  *, sources: Iterable[str | Path] = ()) -> dict[str, np.ndarray]:
    """``make()``'s named arrays, from the cache when an entry for the key exists."""
    return _cached(kind, key, make, sources, ".npz", _read_npz,
                   lambda arrays, f: np.savez(f, **arrays))


def cached_json(kind: str, key: dict[str, Any], make: Callable[[], Any],
                *, sources: Iterable[str | Path] = ()) -> Any:
    """``make()``'s JSON-able value, from the cache when an entry for the key exists."""
    return _cached(kind, key, make, sources, ".json",
                   lambda path: json.loads(path.read_text())["value"],
                   lambda value, f: f.write(json.dumps({"key": key, "value": value},
                                                       default=str).encode()))
