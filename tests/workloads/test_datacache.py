"""Synthetic data built once per sweep (:mod:`parabench.workloads.datacache`): the arrays a case
trains on are the bytes ``make_data`` gives, whether built or loaded; a change of the
generator's code, profile or seed misses; ranks racing on one entry all get whole data and
only one builds; ``--data-dir`` data is never kept; the result says where the data came from."""

from __future__ import annotations

import hashlib
import importlib
import multiprocessing
import sys
import time
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import parabench.workloads  # noqa: F401  (registers the workloads)
from parabench.registry import workloads
from parabench.workload import Dataset, TorchWorkload
from parabench.workloads import datacache
from parabench.workloads.datacache import case_dataset, entry_key, generator_sources

pytestmark = pytest.mark.cpu
ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def assert_identical(a: Dataset, b: Dataset) -> None:
    """Same class, same bytes, dtypes and shapes, same other fields."""
    assert type(a) is type(b)
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), name
    for f in ("n_classes", "profile", "vocab", "pad_id", "bos_id", "eos_id"):
        assert getattr(a, f, None) == getattr(b, f, None), f


@pytest.mark.parametrize("name", ["cnn", "vgg11", "nbow", "gpt", "mlp"])
def test_loaded_data_is_bit_identical_with_what_make_data_gives(name: str,
                                                                tmp_path: Path) -> None:
    workload = workloads.get(name)
    plain = workload.make_data("tiny", 3)
    built = case_dataset(workload, "tiny", 3, folder=tmp_path)
    loaded = case_dataset(workload, "tiny", 3, folder=tmp_path)
    assert built.origin["data_source"] == "built" and built.origin["data_cache"] == "written"
    assert loaded.origin["data_source"] == "sweep cache" and loaded.origin["data_s"] >= 0
    assert_identical(plain, built)
    assert_identical(plain, loaded)


def test_a_sweep_case_gets_its_data_through_the_sweep_folder(tmp_path: Path,
                                                              monkeypatch) -> None:
    from parabench.config import RunConfig
    from parabench.core.tempdirs import SWEEP_DIR_ENV

    config = RunConfig(workload="mlp", method="serial", profile="tiny", seed=1)
    workload = workloads.get("mlp")
    monkeypatch.delenv(SWEEP_DIR_ENV, raising=False)
    assert workload.dataset(config).origin["data_cache"] == "no sweep folder"
    monkeypatch.setenv(SWEEP_DIR_ENV, str(tmp_path))
    assert workload.dataset(config).origin["data_source"] == "built"
    assert workload.dataset(config).origin["data_source"] == "sweep cache"
    assert len(list(tmp_path.glob("data-mlp-tiny-s1-*"))) == 1


def test_profile_and_seed_are_in_the_key() -> None:
    mlp = workloads.get("mlp")
    keys = {entry_key(mlp, p, s) for p in ("tiny", "quick") for s in (0, 1)}
    assert len(keys) == 4


def test_the_generators_code_is_in_the_key() -> None:
    sources = {p.name for p in generator_sources(type(workloads.get("vgg11")))}
    assert {"vgg11.py", "images.py", "synthetic.py", "workload.py"} <= sources


class Counting(TorchWorkload):
    """A workload whose data counts how often it was built (and can be slow to build)."""

    name: ClassVar[str] = "counting"
    builds: ClassVar[list[str]] = []
    delay_s: ClassVar[float] = 0.0
    extra: ClassVar[object] = None

    def make_data(self, profile, seed, data_dir=None):
        self.builds.append(data_dir or profile)
        time.sleep(self.delay_s)
        rng = np.random.default_rng(seed)
        x = rng.integers(0, 255, size=(64, 3, 8, 8), dtype=np.uint8)
        y = rng.integers(0, 4, size=64)
        data = Dataset(x_train=x[:48], y_train=y[:48], x_test=x[48:], y_test=y[48:],
                       n_classes=4, profile=profile)
        if self.extra is not None:
            from parabench.workloads.synthetic import TokenDataset

            return TokenDataset(**{k: getattr(data, k) for k in ARRAYS}, vocab=self.extra)
        return data

    def build_model(self, data, seed):  # pragma: no cover - never trained
        raise NotImplementedError


def test_a_changed_generator_builds_again(tmp_path: Path, monkeypatch) -> None:
    module = tmp_path / "mods" / "edited_workload.py"
    module.parent.mkdir()
    module.write_text("from tests_counting import Counting\n\nclass Edited(Counting):\n"
                      "    pass\n")
    monkeypatch.setattr(sys, "path", [str(module.parent), *sys.path])
    monkeypatch.setitem(sys.modules, "tests_counting", sys.modules[__name__])
    edited = importlib.import_module("edited_workload").Edited()
    monkeypatch.setattr(Counting, "builds", [])
    folder = tmp_path / "sweep"
    folder.mkdir()
    first = entry_key(edited, "tiny", 0)
    case_dataset(edited, "tiny", 0, folder=folder)
    assert case_dataset(edited, "tiny", 0, folder=folder).origin["data_source"] == "sweep cache"
    module.write_text(module.read_text() + "    # only a comment: the same code\n")
    assert entry_key(edited, "tiny", 0) == first
    module.write_text(module.read_text() + "    noise = 0.5  # the generator changed\n")
    assert entry_key(edited, "tiny", 0) != first
    assert case_dataset(edited, "tiny", 0, folder=folder).origin["data_source"] == "built"
    assert Counting.builds == ["tiny", "tiny"]


def test_real_data_is_never_kept(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(Counting, "builds", [])
    data = case_dataset(Counting(), "tiny", 0, data_dir="/some/dir", folder=tmp_path)
    again = case_dataset(Counting(), "tiny", 0, data_dir="/some/dir", folder=tmp_path)
    assert data.origin["data_source"] == again.origin["data_source"] == "data dir"
    assert Counting.builds == ["/some/dir", "/some/dir"] and not list(tmp_path.iterdir())


def test_a_dataset_that_cannot_be_kept_is_built_and_said(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(Counting, "extra", [["not", "plain"]])  # a list of lists: not kept
    data = case_dataset(Counting(), "tiny", 0, folder=tmp_path)
    assert data.origin["data_cache"].startswith("not written: a field")
    monkeypatch.setattr(Counting, "extra", ("<pad>", "a", "b"))  # a tuple of str: kept
    case_dataset(Counting(), "tiny", 1, folder=tmp_path)
    loaded = case_dataset(Counting(), "tiny", 1, folder=tmp_path)
    assert loaded.origin["data_source"] == "sweep cache" and loaded.vocab == ("<pad>", "a", "b")


def test_no_entry_is_written_into_a_nearly_full_disk(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(datacache.shutil, "disk_usage", lambda path: type(
        "Usage", (), {"free": 10_000})())
    data = case_dataset(Counting(), "tiny", 0, folder=tmp_path)
    assert "over half the free" in data.origin["data_cache"]
    assert not list(tmp_path.glob("data-*"))


def test_a_damaged_entry_is_built_again(tmp_path: Path) -> None:
    workload = Counting()
    case_dataset(workload, "tiny", 0, folder=tmp_path)
    (entry,) = tmp_path.glob("data-*")
    (entry / "x_train.npy").write_bytes(b"torn")
    again = case_dataset(workload, "tiny", 0, folder=tmp_path)
    assert again.origin["data_source"] == "built" and again.origin["data_cache"] == "written"
    assert_identical(again, workload.make_data("tiny", 0))
    assert case_dataset(workload, "tiny", 0, folder=tmp_path).origin["data_source"] == (
        "sweep cache")


def test_large_arrays_are_mapped_copy_on_write(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(datacache, "MMAP_BYTES", 1)
    case_dataset(Counting(), "tiny", 0, folder=tmp_path)
    a = case_dataset(Counting(), "tiny", 0, folder=tmp_path)
    assert type(a.x_train) is np.ndarray and a.x_train.flags.writeable
    a.x_train[:] = 0  # stays in this process
    b = case_dataset(Counting(), "tiny", 0, folder=tmp_path)
    assert_identical(b, Counting().make_data("tiny", 0))


def _rank(folder: str, out) -> None:
    data = case_dataset(Counting(), "tiny", 0, folder=Path(folder))
    digest = hashlib.sha256(b"".join(getattr(data, n).tobytes() for n in ARRAYS)).hexdigest()
    out.put((data.origin["data_source"], digest))


def test_ranks_racing_on_one_entry_build_it_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(Counting, "delay_s", 0.5)  # all four start before the first is done
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    ranks = [ctx.Process(target=_rank, args=(str(tmp_path), out)) for _ in range(4)]
    for p in ranks:
        p.start()
    got = [out.get(timeout=60) for _ in ranks]
    for p in ranks:
        p.join(timeout=60)
    assert sorted(source for source, _ in got) == ["built"] + ["sweep cache"] * 3
    assert len({digest for _, digest in got}) == 1
    assert not list(tmp_path.glob(".tmp-*"))  # no temporary folder left behind


#: sha256 (first 16 hex) of the synthetic generators' output before they were sped up: the
#: same arguments must keep giving the same bytes
PINNED = {
    "images": ("55fea049c7dcf232", dict(n=300, classes=10, channels=3, size=40, seed=3,
                                        noise=0.9, separation=0.4)),
    "digits+extra": ("224cccc92a229cb1", dict(n=600, classes=10, channels=1, size=28, seed=0,
                                              noise=0.45, extra_held_out=50)),
}


@pytest.mark.parametrize("case", sorted(PINNED))
def test_the_image_generator_gives_the_bytes_it_always_gave(case: str) -> None:
    from parabench.workloads.synthetic import class_images, reversal_pairs

    want, kwargs = PINNED[case]
    data = class_images(**kwargs)
    h = hashlib.sha256()
    for a in (data.x_train, data.y_train, data.x_test, data.y_test):
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(a.tobytes())
    assert h.hexdigest()[:16] == want
    pairs = reversal_pairs(n=400, vocab_size=6, max_len=3, seed=2)  # duplicates dropped
    assert len(pairs.x_train) + len(pairs.x_test) == 4


def test_usage_note_is_json(tmp_path: Path) -> None:
    import json

    origin = dict(case_dataset(workloads.get("mlp"), "tiny", 0, folder=tmp_path).origin)
    assert json.loads(json.dumps(origin)) == origin and set(origin) >= {"data_source", "data_s"}

