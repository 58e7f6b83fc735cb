"""Calibrated time-to-quality entries: the user's stores, looked up before the shipped table.

Usage::

    from parabench.workloads.targetstore import data_fingerprint, lookup, store_paths
    store_paths()                   # [$PARABENCH_TARGETS if set, the user store]
    found = lookup("mlp", "tiny")   # Found(entry, source, stale): entry None where no store has it
    found.entry, found.source, found.stale   # source: the store's path
    data_fingerprint(None)          # None: synthetic data

``parabench calibrate`` (:mod:`parabench.sweep.calibrate`) measures serial on one workload,
profile, data and device and writes an entry to a store: JSON ``{"about": ..., "entries":
{workload: {profile: [entry, ...]}}}``, by default ``targets.json`` in the per-user cache
directory (:func:`parabench.cache.cache_dir`), or the file ``--targets FILE`` names. An entry
has the shipped table's fields (``target``, ``values``, ``curves``, ``seeds``, ``epochs``, ...)
plus what it is valid for: ``workload_version`` (:mod:`parabench.workloads.version`, the
fingerprint of the model and data code), ``data`` (None for the synthetic data, else
:func:`data_fingerprint` of the ``--data-dir``) and ``device``.

:func:`lookup` reads, in order, the store named by ``$PARABENCH_TARGETS`` (the CLI sets it
from ``--targets FILE``, so the case processes it spawns read the same), then the user store;
:mod:`parabench.workloads.quality_targets` falls back to the shipped table
(``quality_targets.json``, measured on synthetic data by ``scripts/quality_targets.py``; it
records no version). A store entry counts when its
workload, profile, data and device match and its ``workload_version`` is the current code's;
one that matches but for the version is stale: not used, and said so (``Found.stale``).
Writing replaces the matching entry and is atomic (a temporary file, then a rename).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from parabench.cache import cache_dir, cached_json

#: the environment variable that names the ``--targets FILE`` store (set by the CLI)
ENV = "PARABENCH_TARGETS"
ABOUT = ("Calibrated time-to-quality entries written by `parabench calibrate`: per workload and "
         "profile, serial's measured target, epoch budget, per-seed curves and the code, data "
         "and device they are valid for (parabench.workloads.targetstore).")
#: the fields that say what an entry is valid for (besides workload and profile)
KEYS = ("workload_version", "data", "device")


def user_store() -> Path | None:
    """The per-user store (``targets.json`` in the cache directory); None with the cache off."""
    root = cache_dir()
    return None if root is None else root / "targets.json"


def store_paths() -> list[Path]:
    """The stores :func:`lookup` reads before the shipped table, first wins."""
    named = os.environ.get(ENV)
    return [p for p in (Path(named) if named else None, user_store()) if p is not None]


def data_fingerprint(data_dir: str | Path | None) -> str | None:
    """None for synthetic data; else a hash of the files under ``data_dir`` (or the file):
    their relative names, sizes and contents. The contents are read once per listing (names,
    sizes, modification times), then kept in the cache (:func:`parabench.cache.cached_json`)."""
    if data_dir is None:
        return None
    root = Path(data_dir).expanduser().resolve()
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    names = [str(p.relative_to(root)) if root.is_dir() else p.name for p in files]
    listing = [(n, p.stat().st_size, p.stat().st_mtime_ns)
               for n, p in zip(names, files, strict=True)]
    key = {"root": str(root), "listing": hashlib.sha256(repr(listing).encode()).hexdigest()}
    return cached_json("data-fingerprint", key, lambda: _content_hash(files, listing))


def _content_hash(files: list[Path], listing: list[tuple[str, int, int]]) -> str:
    h = hashlib.sha256()
    for path, (name, size, _) in zip(files, listing, strict=True):
        h.update(f"{name}\0{size}\0".encode())
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return f"{len(files)} file(s), sha256 {h.hexdigest()[:16]}"


def current_version(workload: str) -> str | None:
    """The workload's code fingerprint now; None for a name not registered."""
    from parabench.registry import workloads  # late: the registry imports every workload
    from parabench.workloads.version import workload_version

    return workload_version(workloads.get(workload)) if workload in workloads else None


def current_libraries(workload: str) -> dict[str, str | None] | None:
    """The library versions in the workload's version now (:func:`current_version`), kept
    in an entry so a later check can tell a changed library from changed code."""
    from parabench.registry import workloads
    from parabench.workloads.version import workload_libraries

    return workload_libraries(workloads.get(workload)) if workload in workloads else None


def read_store(path: Path) -> dict[str, Any]:
    """A store's ``entries`` ({} when absent or unreadable)."""
    try:
        return json.loads(path.read_text())["entries"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def matches(entry: dict[str, Any], want: dict[str, Any], *, version: bool = True) -> bool:
    """``entry`` is for ``want``'s data and device (and version, unless ``version`` is False);
    a ``device`` of None in ``want`` matches any."""
    if version and entry.get("workload_version") != want.get("workload_version"):
        return False
    if entry.get("data") != want.get("data"):
        return False
    return want.get("device") is None or entry.get("device") == want["device"]


def write_entry(path: Path, workload: str, profile: str, entry: dict[str, Any]) -> None:
    """Put ``entry`` in the store at ``path``, replacing the one for the same version, data and
    device; atomically (a temporary file in the same folder, then a rename)."""
    old = read_store(path)
    kept = [e for e in old.get(workload, {}).get(profile, [])
            if not all(e.get(k) == entry.get(k) for k in KEYS)]
    old.setdefault(workload, {})[profile] = [*kept, entry]
    write_json(path, {"about": ABOUT, "entries": old})


def write_json(path: Path, value: Any) -> None:
    """``value`` as JSON at ``path``, written to a temporary name and renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(value, indent=1) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class Found:
    """What :func:`lookup` found: ``entry`` (None: no store has a usable one), ``source`` (the
    store's path), and ``stale``: where a store held an entry for other code (not used)."""

    entry: dict[str, Any] | None
    source: str | None = None
    stale: str | None = None


def lookup(workload: str, profile: str, data_dir: str | None = None,
           device: str | None = None) -> Found:
    """The entry of ``workload`` at ``profile`` for this data and device from the first store
    of :func:`store_paths` that has a current one (the shipped table is
    :mod:`parabench.workloads.quality_targets`' to add)."""
    stale = None
    want: dict[str, Any] | None = None
    for path in store_paths():
        candidates = read_store(path).get(workload, {}).get(profile, [])
        if not candidates:
            continue
        if want is None:
            want = {"workload_version": current_version(workload),
                    "data": data_fingerprint(data_dir), "device": device}
        for entry in reversed(candidates):
            if matches(entry, want):
                return Found(entry, str(path), stale)
        for entry in candidates:
            if stale is None and matches(entry, want, version=False):
                stale = (f"{path} has an entry for {workload} at {profile} measured on other "
                         f"code (version {entry.get('workload_version')}, now "
                         f"{want['workload_version']}): stale, not used")
    return Found(None, None, stale)
