"""Real-format loaders: tiny files in each on-disk format, read through the same code path."""

from __future__ import annotations

import gzip
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from datafiles import (
    MNIST_IMAGES,
    MNIST_LABELS,
    PALETTE,
    write_cifar10,
    write_idx,
    write_image_folder,
    write_labeled_text,
    write_mnist,
    write_text_pairs,
)
from parabench.config import ConfigError
from parabench.workloads.datasets import (
    DatasetError,
    load_cifar10,
    load_image_folder,
    load_labeled_text,
    load_mnist,
    load_text_pairs,
    tokenize,
)

needs_torch = pytest.mark.torch  # image loaders run torchvision; text loaders need numpy only


def _raises(fn, *args, match: str, **kwargs) -> None:
    """Call ``fn``; it must raise DatasetError whose message contains every ``|``-part."""
    with pytest.raises(DatasetError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    for part in match.split("|"):
        assert part in message, f"{part!r} not in {message!r}"


def test_dataset_error_is_a_config_error_and_import_needs_no_torch() -> None:
    assert issubclass(DatasetError, ConfigError)
    code = "import sys, parabench.workloads.datasets; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ---- MNIST ---------------------------------------------------------------------------------


def _idx_payload(path: Path) -> np.ndarray:
    """The raw data bytes of an idx file, read independently of the loader."""
    data = path.read_bytes()
    data = gzip.decompress(data) if path.suffix == ".gz" else data
    ndim = data[3]
    return np.frombuffer(data[4 + 4 * ndim :], dtype=np.uint8)


@needs_torch
@pytest.mark.parametrize(
    ("subdir", "gz"), [("MNIST/raw", False), ("MNIST/raw", True), ("raw", False), ("", True)]
)
def test_mnist_reads_the_idx_files_in_each_accepted_place(
    tmp_path: Path, subdir: str, gz: bool
) -> None:
    write_mnist(tmp_path, 30, n_test=12, gz=gz, subdir=subdir)
    data = load_mnist(str(tmp_path))
    assert data.x_train.shape == (30, 1, 28, 28) and data.x_test.shape == (12, 1, 28, 28)
    assert data.x_train.dtype == np.uint8 and data.y_train.dtype == np.int64
    assert data.n_classes == 10
    suffix = ".gz" if gz else ""
    raw = tmp_path / subdir
    assert np.array_equal(data.y_train, _idx_payload(raw / f"train-labels-idx1-ubyte{suffix}"))
    assert np.array_equal(data.y_test, _idx_payload(raw / f"t10k-labels-idx1-ubyte{suffix}"))
    assert data.x_test.tobytes() == _idx_payload(raw / f"t10k-images-idx3-ubyte{suffix}").tobytes()
    # the class square is where the writer put it: the label really belongs to the image
    c = int(data.y_train[0])
    r, col = 2 + (c // 4) * 9, 1 + (c % 4) * 7
    assert (data.x_train[0, 0, r : r + 8, col : col + 6] == 255).all()


@needs_torch
def test_mnist_missing_directory_or_file_names_the_layout(tmp_path: Path) -> None:
    _raises(load_mnist, str(tmp_path / "no"), match="no such directory|MNIST/raw|train-images")
    _raises(load_mnist, str(tmp_path), match="no MNIST idx files|t10k-labels-idx1-ubyte")
    write_mnist(tmp_path, 20)
    (tmp_path / "MNIST/raw/t10k-labels-idx1-ubyte").unlink()
    _raises(load_mnist, str(tmp_path), match="missing t10k-labels-idx1-ubyte|expected MNIST")


@needs_torch
def test_mnist_wrong_magic_truncated_and_mismatched_files_are_dataset_errors(
    tmp_path: Path,
) -> None:
    raw = tmp_path / "MNIST/raw"
    write_mnist(tmp_path, 20)
    labels = raw / "train-labels-idx1-ubyte"
    good = labels.read_bytes()
    write_idx(labels, np.zeros((20, 28, 28), np.uint8), MNIST_IMAGES)  # images where labels go
    _raises(load_mnist, str(tmp_path), match="train-labels-idx1-ubyte|00000801|expected MNIST")
    labels.write_text("not an idx file")
    _raises(load_mnist, str(tmp_path), match="not an idx file of this kind")
    labels.write_bytes(good[:-5])  # header says 20 labels, 15 follow
    _raises(load_mnist, str(tmp_path), match="malformed or truncated|expected MNIST")
    write_idx(labels, np.zeros(19, np.uint8), MNIST_LABELS)
    _raises(load_mnist, str(tmp_path), match="20 images but 19 labels")
    write_idx(labels, np.full(20, 12, np.uint8), MNIST_LABELS)
    _raises(load_mnist, str(tmp_path), match="labels outside 0..9")
    (raw / "train-labels-idx1-ubyte").unlink()
    (raw / "train-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8b broken gzip")
    _raises(load_mnist, str(tmp_path), match="cannot be read|expected MNIST")


# ---- CIFAR-10 ------------------------------------------------------------------------------


@needs_torch
def test_cifar10_reads_python_batches_in_channel_major_order(tmp_path: Path) -> None:
    write_cifar10(tmp_path, 23, n_test=11)
    data = load_cifar10(str(tmp_path))
    assert data.x_train.shape == (23, 3, 32, 32) and data.x_test.shape == (11, 3, 32, 32)
    assert data.x_train.dtype == np.uint8 and data.y_test.dtype == np.int64
    assert data.n_classes == 10
    entry = pickle.loads((tmp_path / "cifar-10-batches-py/test_batch").read_bytes())
    assert np.array_equal(data.y_test, entry["labels"])
    assert np.array_equal(data.x_test.reshape(11, 3072), entry["data"])
    # channel c of an image is its class colour's channel c (plus noise of at most 40)
    means = data.x_train.reshape(23, 3, -1).mean(axis=2)
    assert np.abs(means - PALETTE[data.y_train]).max() < 15


@needs_torch
def test_cifar10_accepts_the_batch_folder_itself_and_no_meta(tmp_path: Path) -> None:
    write_cifar10(tmp_path, 10, meta=False)
    data = load_cifar10(str(tmp_path / "cifar-10-batches-py"))
    assert data.n_train == 10 and data.n_classes == 10


@needs_torch
def test_cifar10_missing_or_corrupt_batches_are_dataset_errors(tmp_path: Path) -> None:
    _raises(load_cifar10, str(tmp_path), match="missing data_batch_1|cifar-10-batches-py")
    write_cifar10(tmp_path, 10)
    folder = tmp_path / "cifar-10-batches-py"
    (folder / "test_batch").unlink()
    _raises(load_cifar10, str(tmp_path), match="missing test_batch|expected the CIFAR-10")
    (folder / "test_batch").write_bytes(b"garbage")
    _raises(load_cifar10, str(tmp_path), match="not a CIFAR-10 python batch|test_batch")
    bad = {"data": np.zeros((2, 100), np.uint8), "labels": [0, 1]}  # rows are not 3x32x32
    (folder / "test_batch").write_bytes(pickle.dumps(bad))
    _raises(load_cifar10, str(tmp_path), match="not a CIFAR-10 python batch")
    bad = {"data": np.zeros((2, 3072), np.uint8), "labels": [0, 1, 2]}
    (folder / "test_batch").write_bytes(pickle.dumps(bad))
    _raises(load_cifar10, str(tmp_path), match="2 images but 3 labels")


# ---- Image folders -------------------------------------------------------------------------


def _row_set(x: np.ndarray) -> set[bytes]:
    return {row.tobytes() for row in x}


@needs_torch
def test_image_folder_tree_is_split_by_seed_stratified_and_disjoint(tmp_path: Path) -> None:
    write_image_folder(tmp_path, ["cat", "ant", "bee"], 10, 12)
    a = load_image_folder(str(tmp_path), 8, seed=0)
    b = load_image_folder(str(tmp_path), 8, seed=0)
    c = load_image_folder(str(tmp_path), 8, seed=1)
    assert a.x_train.shape == (24, 3, 8, 8) and a.x_test.shape == (6, 3, 8, 8)
    assert a.x_train.dtype == np.uint8 and a.y_train.dtype == np.int64 and a.n_classes == 3
    assert np.bincount(a.y_test).tolist() == [2, 2, 2]  # 20 % of every class held out
    assert a.x_train.tobytes() == b.x_train.tobytes() and a.x_test.tobytes() == b.x_test.tobytes()
    assert _row_set(a.x_test) != _row_set(c.x_test)
    assert not _row_set(a.x_test) & _row_set(a.x_train)
    assert _row_set(a.x_test) | _row_set(a.x_train) == _row_set(c.x_test) | _row_set(c.x_train)
    # class ids follow the sorted folder names (ant, bee, cat); the writer coloured cat as 0
    means = a.x_train.reshape(24, 3, -1).mean(axis=2)
    colour_of = {0: PALETTE[1], 1: PALETTE[2], 2: PALETTE[0]}
    expected = np.stack([colour_of[int(y)] for y in a.y_train])
    assert np.abs(means - expected).max() < 15


@needs_torch
def test_image_folder_imagenette_layout_keeps_the_official_split(tmp_path: Path) -> None:
    write_image_folder(tmp_path, ["n01", "n02"], 6, 20, split=True, n_val=3, fmt="jpeg")
    assert next((tmp_path / "val/n02").iterdir()).suffix == ".JPEG"
    data = load_image_folder(str(tmp_path), 16, seed=0)
    assert data.x_train.shape == (12, 3, 16, 16) and data.x_test.shape == (6, 3, 16, 16)
    assert np.bincount(data.y_test).tolist() == [3, 3] and data.n_classes == 2
    assert not _row_set(data.x_test) & _row_set(data.x_train)


@needs_torch
def test_image_folder_resizes_the_shorter_side_then_centre_crops(tmp_path: Path) -> None:
    from PIL import Image

    image = np.zeros((20, 60, 3), np.uint8)  # red | green | blue thirds, 20 x 20 each
    image[:, :20, 0], image[:, 20:40, 1], image[:, 40:, 2] = 255, 255, 255
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        for i in range(2):
            Image.fromarray(image).save(tmp_path / name / f"{i}.png")
    data = load_image_folder(str(tmp_path), 10, seed=0, test_fraction=0.5)
    x = np.concatenate([data.x_train, data.x_test]).astype(int)
    # a squashing resize would keep red and blue; shorter-side resize + crop keeps green
    assert (x[:, 1, :, 2:8] == 255).all() and x[:, [0, 2]].max() < 60


@needs_torch
def test_image_folder_bad_layouts_are_dataset_errors(tmp_path: Path) -> None:
    layout = "expected an Imagenette-style tree"
    _raises(load_image_folder, str(tmp_path / "nope"), 8, 0, match=f"no such directory|{layout}")
    _raises(load_image_folder, str(tmp_path), 8, 0, match=layout)  # no class folders
    write_image_folder(tmp_path / "one", 1, 4, 8)
    _raises(load_image_folder, str(tmp_path / "one"), 8, 0, match="need at least 2|<class>")
    write_image_folder(tmp_path / "tiny", 2, 1, 8)  # one image per class: nothing to hold out
    _raises(load_image_folder, str(tmp_path / "tiny"), 8, 0, match="held-out split")
    write_image_folder(tmp_path / "half", 2, 4, 8, split=True)
    for image in (tmp_path / "half/val/class1").iterdir():
        image.unlink()
    _raises(load_image_folder, str(tmp_path / "half"), 8, 0, match="class1|val/<class>")
    (tmp_path / "half/val/class1").rmdir()
    _raises(load_image_folder, str(tmp_path / "half"), 8, 0, match="but val/ has")
    write_image_folder(tmp_path / "notval", 2, 4, 8, split=True)
    (tmp_path / "notval/val").rename(tmp_path / "notval/valid")
    _raises(load_image_folder, str(tmp_path / "notval"), 8, 0, match="has train/ but not")


@needs_torch
def test_image_folder_undecodable_image_is_named(tmp_path: Path) -> None:
    write_image_folder(tmp_path, 2, 3, 8)
    broken = tmp_path / "class1" / "broken.png"
    broken.write_bytes(b"\x89PNG not really")
    _raises(load_image_folder, str(tmp_path), 8, 0, match=f"{broken}|cannot decode")


# ---- Text ----------------------------------------------------------------------------------


def _unique_word_lines(n: int) -> list[str]:
    """Lines whose second word ``wK`` occurs nowhere else: it identifies the line."""
    return [f"{('neg', 'pos', 'mid')[k % 3]}\tcommon w{k} words here" for k in range(n)]


def _is_id(word: str, prefix: str) -> bool:
    return word.startswith(prefix) and word[1:].isdigit()


def _decode(row: np.ndarray, vocab: tuple[str, ...]) -> list[str]:
    return [vocab[i] for i in row if i != 0]


@pytest.mark.cpu
def test_labeled_text_split_is_seeded_stratified_and_vocab_comes_from_training(
    tmp_path: Path,
) -> None:
    path = tmp_path / "text.tsv"
    path.write_text("\n".join(_unique_word_lines(30)) + "\n")
    a = load_labeled_text(str(path), seed=0, max_len=6)
    b = load_labeled_text(str(path), seed=0, max_len=6)
    assert a.x_train.tobytes() == b.x_train.tobytes() and a.y_test.tobytes() == b.y_test.tobytes()
    assert a.x_train.shape == (24, 6) and a.x_test.shape == (6, 6)
    assert a.x_train.dtype == np.int64 and a.y_train.dtype == np.int64
    assert a.labels == ("mid", "neg", "pos") and a.n_classes == 3
    assert np.bincount(a.y_test).tolist() == [2, 2, 2]
    assert a.vocab[:2] == ("<pad>", "<unk>") and (a.pad_id, a.unk_id) == (0, 1)
    train_ids = {w for row in a.x_train for w in _decode(row, a.vocab) if _is_id(w, "w")}
    assert len(train_ids) == 24  # every training line kept its identifying word
    assert {w for w in a.vocab if _is_id(w, "w")} == train_ids  # nothing from held-out
    assert (a.x_test[:, 1] == a.unk_id).all()  # held-out words were never seen in training
    for row, y in zip(a.x_train, a.y_train, strict=True):  # the label still belongs to its line
        k = int(_decode(row, a.vocab)[1][1:])
        assert a.labels[y] == ("neg", "pos", "mid")[k % 3]
    other = load_labeled_text(str(path), seed=1, max_len=6)
    assert {w for w in other.vocab if _is_id(w, "w")} != train_ids


@pytest.mark.cpu
def test_labeled_text_pads_truncates_caps_the_vocab_and_tokenizes(tmp_path: Path) -> None:
    assert tokenize("Don't STOP, ok!") == ["don't", "stop", ",", "ok", "!"]
    path = write_labeled_text(tmp_path / "reviews.tsv", 40)
    data = load_labeled_text(str(path), seed=0, max_len=3, vocab_size=10)
    assert data.x_train.shape == (32, 3) and (data.x_train != 0).all()  # lines >= 5 words: cut
    assert len(data.vocab) == 10 and data.x_train.max() < 10
    long = load_labeled_text(str(path), seed=0, max_len=40)
    assert (long.x_train[:, -1] == 0).all()  # lines <= 9 words: padded with pad_id
    assert data.labels == ("negative", "positive")


@pytest.mark.cpu
def test_labeled_text_skips_blank_lines_and_reads_crlf(tmp_path: Path) -> None:
    path = tmp_path / "win.tsv"
    lines = [f"{'ab'[k % 2]}\tword{k % 2} x{k}" for k in range(10)]
    path.write_bytes(("\r\n".join(lines[:5]) + "\r\n\r\n" + "\r\n".join(lines[5:])).encode())
    data = load_labeled_text(str(path), seed=0, max_len=2)
    assert data.n_train + len(data.x_test) == 10
    assert not any("\r" in tok for tok in data.vocab)


def _bad_text(tmp_path: Path, content: bytes | str) -> Path:
    path = tmp_path / "bad.tsv"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


@pytest.mark.cpu
@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("", "no samples"),
        ("\n  \n", "no samples"),
        ("a\tone two\nb\tthree\nno tab here\n", "line 3 has no tab"),
        ("a\tone two\nb\t   \n", "line 2 has an empty text"),
        ("a\tone\n\tlabel missing\n", "line 2 has an empty label"),
        ("same\tone\nsame\ttwo\nsame\tthree\n", "need at least 2"),
        ("a\tone\nb\ttwo\n", "held-out split"),  # one line per class: nothing to hold out
        (b"a\tcaf\xe9\nb\tx\n", "not UTF-8"),
    ],
)
def test_labeled_text_bad_files_are_dataset_errors(
    tmp_path: Path, content: bytes | str, match: str
) -> None:
    path = _bad_text(tmp_path, content)
    _raises(load_labeled_text, str(path), 0, 8, match=f"{match}|label<TAB>text|{path}")


@pytest.mark.cpu
def test_text_loaders_reject_missing_paths_and_bad_arguments(tmp_path: Path) -> None:
    _raises(load_labeled_text, str(tmp_path / "no.tsv"), 0, 8, match="no such file|label<TAB>")
    _raises(load_text_pairs, str(tmp_path), 0, 8, match="is a directory|source<TAB>target")
    path = write_labeled_text(tmp_path / "ok.tsv", 20)
    _raises(load_labeled_text, str(path), 0, 8, test_fraction=1.0, match="test_fraction")
    _raises(load_labeled_text, str(path), 0, 0, match="max_len")
    _raises(load_labeled_text, str(path), 0, 8, vocab_size=2, match="vocab_size")
    pairs = write_text_pairs(tmp_path / "pairs.tsv", 20)
    _raises(load_text_pairs, str(pairs), 0, 1, match="max_len must be at least 2")


@pytest.mark.cpu
def test_text_pairs_wrap_targets_in_bos_eos_and_keep_the_task(tmp_path: Path) -> None:
    path = write_text_pairs(tmp_path / "pairs.tsv", 50, max_tokens=5)
    data = load_text_pairs(str(path), seed=0, max_len=6)
    assert data.x_train.shape == (40, 6) and data.y_train.shape == (40, 7)
    assert data.x_test.dtype == np.int64 and data.y_test.dtype == np.int64
    assert (data.bos_id, data.eos_id, data.pad_id) == (2, 3, 0)
    assert data.vocab[:4] == ("<pad>", "<unk>", "<bos>", "<eos>")
    assert data.n_classes == len(data.vocab)
    assert (data.y_train[:, 0] == data.bos_id).all()
    for x, y in zip(data.x_train, data.y_train, strict=True):
        end = int(np.flatnonzero(y == data.eos_id)[0])
        assert (y[end + 1 :] == 0).all()
        assert _decode(y[1:end], data.vocab) == _decode(x, data.vocab)[::-1]  # reversal
    cut = load_text_pairs(str(path), seed=0, max_len=3)  # 2 target tokens fit between bos/eos
    assert (cut.y_train[:, 3] == cut.eos_id).all() and (cut.x_train[:, :2] != 0).all()


@pytest.mark.cpu
def test_text_pairs_split_is_seeded_disjoint_and_vocab_is_training_only(tmp_path: Path) -> None:
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"go s{k}\tt{k} went\n" for k in range(20)))
    a = load_text_pairs(str(path), seed=3, max_len=4)
    b = load_text_pairs(str(path), seed=3, max_len=4)
    assert a.x_test.tobytes() == b.x_test.tobytes() and a.vocab == b.vocab
    assert a.x_train.shape == (16, 4) and a.x_test.shape == (4, 4)
    train_src = {_decode(row, a.vocab)[1] for row in a.x_train}
    assert len(train_src) == 16 and {w for w in a.vocab if _is_id(w, "s")} == train_src
    assert (a.x_test[:, 1] == a.unk_id).all() and (a.y_test[:, 1] == a.unk_id).all()
    c = load_text_pairs(str(path), seed=4, max_len=4)
    assert {w for w in c.vocab if _is_id(w, "s")} != train_src


@pytest.mark.cpu
@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("a b\tb a\nc d\n", "line 2 has no tab"),
        ("a b\tb a\nc d\t\n", "line 2 has an empty target"),
        ("\tb a\n", "line 1 has an empty source"),
        ("a b\tb a\n", "held-out split"),
    ],
)
def test_text_pairs_bad_files_are_dataset_errors(
    tmp_path: Path, content: str, match: str
) -> None:
    path = _bad_text(tmp_path, content)
    _raises(load_text_pairs, str(path), 0, 8, match=f"{match}|source<TAB>target")


@pytest.mark.cpu
def test_text_dataset_pickles(tmp_path: Path) -> None:
    data = load_text_pairs(str(write_text_pairs(tmp_path / "p.tsv", 10)), seed=0, max_len=4)
    copy = pickle.loads(pickle.dumps(data))
    assert copy.vocab == data.vocab and copy.y_test.tobytes() == data.y_test.tobytes()
    assert copy.bos_id == data.bos_id
