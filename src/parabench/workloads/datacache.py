"""Synthetic data built once per sweep: the first case (or rank) that needs it builds it and
writes it to the sweep's folder; every later one loads it.

Usage::

    data = case_dataset(workload, "tiny", seed=0)            # outside a sweep: built
    data.origin["data_source"], data.origin["data_s"]        # ('built', seconds)
    first = case_dataset(workload, "tiny", 0, folder=tmp)    # the first case of a sweep builds
    again = case_dataset(workload, "tiny", 0, folder=tmp)    #   and writes; the others load:
    again.origin["data_source"]                              # 'sweep cache'

:meth:`parabench.workload.Workload.dataset` does this for every case, in the folder the runner
names (``$PARABENCH_SWEEP_DIR``, :func:`parabench.core.tempdirs.sweep_dir`). Every case runs in
its own process, and every rank of a distributed one built its data again: at vgg11's full
profile (224 px images) most of a case's start-up, where loading the built arrays takes a
small fraction of it.

Why not :mod:`parabench.cache`: that cache is persistent (``~/.cache``) and keeps small
answers (JSON, ``.npz``) forever; a full-profile image set is gigabytes per (profile, seed),
so it lives only as long as the sweep, and as plain ``.npy`` files that large arrays are
memory-mapped from (copy-on-write: ranks on one machine share the pages, a write stays private).

An entry is keyed (:func:`parabench.cache.entry_name`) by the workload, profile and seed (all
``make_data`` receives), numpy's version, this module's code, and the workload's version
(:func:`parabench.workloads.version.workload_version`, which results record too): the bytes of
the modules that define it (its classes' and the workload modules they import), so a change
of the generator never reads stale data. An entry is a folder written under a temporary name and
renamed, so a reader sees all of it or none; a lock file makes the ranks that need the same
entry wait for the one building it, then load it (without ``fcntl``: each builds, the first
rename wins). A dataset with a field that is neither an array nor plain JSON is not written;
``--data-dir`` data is never cached. The arrays are the bytes ``make_data`` returns.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from parabench.cache import entry_name
from parabench.core.clock import Stopwatch
from parabench.dataset import Dataset
from parabench.workloads.version import defining_modules, workload_version

if TYPE_CHECKING:
    from parabench.workload import Workload

#: arrays at least this large are memory-mapped rather than read
MMAP_BYTES = 1 << 20
_PLAIN = (type(None), bool, int, float, str)


def case_dataset(workload: Workload, profile: str, seed: int, data_dir: str | None = None,
                 *, folder: Path | None = None) -> Dataset:
    """``workload.make_data(profile, seed, data_dir)``, through the sweep's folder (``folder``,
    default :func:`~parabench.core.tempdirs.sweep_dir`) when the data is synthetic; its
    ``origin`` says where it came from and the seconds it took."""
    from parabench.core.tempdirs import sweep_dir

    watch = Stopwatch()
    if data_dir is not None:
        data = workload.make_data(profile, seed, data_dir=data_dir)
        return _noted(data, watch, data_source="data dir")
    folder = folder if folder is not None else sweep_dir()
    if folder is None:
        data = workload.make_data(profile, seed)
        return _noted(data, watch, data_source="built", data_cache="no sweep folder")
    entry = folder / entry_key(workload, profile, seed)
    data = _load(entry)
    if data is not None:
        return _noted(data, watch, data_source="sweep cache")
    with _locked(entry.with_name(f".{entry.name}.lock")) as waited:
        data = _load(entry)  # built while this one waited for the lock
        if data is not None:
            return _noted(data, watch, data_source="sweep cache", data_wait_s=waited)
        data = workload.make_data(profile, seed)
        return _noted(data, watch, data_source="built", data_cache=store(entry, data))


def entry_key(workload: Workload, profile: str, seed: int) -> str:
    """The entry's folder name: readable, then a hash of what makes its bytes."""
    cls = type(workload)
    key = {"workload": workload.name, "class": f"{cls.__module__}.{cls.__qualname__}",
           "profile": profile, "seed": seed, "numpy": np.__version__,
           "version": workload_version(workload)}
    return entry_name(f"data-{workload.name}-{profile}-s{seed}", key, [__file__])


def generator_sources(cls: type) -> list[Path]:
    """The files whose code may make a workload's data: those its version hashes."""
    return sorted(defining_modules(cls).values())


def _noted(data: Dataset, watch: Stopwatch, **notes: Any) -> Dataset:
    notes = {k: round(v, 3) if isinstance(v, float) else v for k, v in notes.items()
             if v is not None}
    return dataclasses.replace(data, origin={**notes, "data_s": round(watch.seconds(), 3)})


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[float | None]:
    """Hold an exclusive lock on ``path`` (released when the process ends, however it ends);
    yields the seconds waited for it when there was a wait, else None."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock, racing builders each write, the first rename wins
        yield None
        return
    watch = Stopwatch()
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        waited = watch.seconds()
        try:
            yield waited if waited > 0.05 else None
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _meta(data: Dataset) -> dict[str, Any] | None:
    """How to make ``data`` again from its ``.npy`` files; None when a field cannot be kept
    (neither a plain array nor plain JSON, or a class that cannot be imported by name)."""
    cls = type(data)
    meta: dict[str, Any] = {"class": f"{cls.__module__}:{cls.__qualname__}", "arrays": [],
                            "fields": {}, "tuples": []}
    if "<locals>" in cls.__qualname__:
        return None
    for f in dataclasses.fields(data):
        value = getattr(data, f.name)
        if f.name == "origin":
            continue
        if isinstance(value, np.ndarray) and not value.dtype.hasobject:
            meta["arrays"].append(f.name)
        elif type(value) in _PLAIN:
            meta["fields"][f.name] = value
        elif type(value) is tuple and all(type(v) in _PLAIN for v in value):
            meta["fields"][f.name] = list(value)
            meta["tuples"].append(f.name)
        else:
            return None
    return meta


def store(entry: Path, data: Dataset) -> str:
    """Write ``data`` as the folder ``entry`` (a temporary folder, renamed); what happened."""
    meta = _meta(data)
    if meta is None:
        return "not written: a field is neither an array nor plain JSON"
    size = sum(getattr(data, name).nbytes for name in meta["arrays"])
    free = shutil.disk_usage(entry.parent).free
    if size > free / 2:
        return f"not written: {size / 2**20:.0f} MB is over half the free {free / 2**20:.0f} MB"
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
    try:
        for name in meta["arrays"]:
            np.save(tmp / f"{name}.npy", getattr(data, name), allow_pickle=False)
        (tmp / "meta.json").write_text(json.dumps(meta))
        shutil.rmtree(entry, ignore_errors=True)  # one that could not be read (under the lock)
        os.replace(tmp, entry)
    except (OSError, ValueError) as e:
        shutil.rmtree(tmp, ignore_errors=True)
        return f"not written: {e}"
    return "written"


def _load(entry: Path) -> Dataset | None:
    """The dataset kept in ``entry``; None when there is none or it cannot be read."""
    try:
        meta = json.loads((entry / "meta.json").read_text())
        module, _, qualname = meta["class"].partition(":")
        cls: Any = importlib.import_module(module)
        for part in qualname.split("."):
            cls = getattr(cls, part)
        if not (isinstance(cls, type) and issubclass(cls, Dataset)):
            return None
        values = {name: _read(entry / f"{name}.npy") for name in meta["arrays"]}
        values.update(meta["fields"])
        values.update({name: tuple(meta["fields"][name]) for name in meta["tuples"]})
        return cls(**values)
    except (OSError, ValueError, KeyError, TypeError, ImportError, AttributeError):
        return None


def _read(path: Path) -> np.ndarray:
    """The array in ``path``; a large one memory-mapped copy-on-write (a plain, writable
    ndarray whose writes never reach the file)."""
    mode = "c" if path.stat().st_size >= MMAP_BYTES else None
    return np.asarray(np.load(path, mmap_mode=mode, allow_pickle=False))
