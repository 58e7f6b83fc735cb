"""Nothing lost at the edges (issue 44): output paths checked before any case starts, appends
all or nothing, and inputs no case could satisfy refused up front.

Run: ``pytest -q tests/cli/test_edges.py -p no:cacheprovider``. Each scenario runs the real CLI
(:func:`parabench.cli.main`) and asserts the exit code, the one ``parabench: error:`` line (no
traceback) and what was or was not written: a refused run leaves no result behind.

A full disk is a real one where this process may mount a 64 KiB tmpfs (root, as in CI's
containers); elsewhere ``os.write`` is patched to do what a full disk does (write part, then
ENOSPC), and the real-filesystem tests are skipped.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import sweepdata
from parabench.case.result import ResultWriteError, append_result, read_results

pytestmark = pytest.mark.cpu

RUN = ["run", "--workload", "mlp", "--method", "serial", "--profile", "tiny", "--epochs", "1",
       "--steps", "0"]
NOWHERE = "/proc/parabench-nope"  # cannot be created, not even by root


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``parabench ARGV`` in this process: its exit code and its ``parabench:`` error line."""
    from parabench.cli import main

    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("parabench: error:")]
    assert len(errors) == 1, err
    return code, errors[0]


def _mount(where: Path, options: str) -> bool:
    if shutil.which("mount") is None:
        return False
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                          capture_output=True, check=False)
    return proc.returncode == 0


def _umount(where: Path) -> None:
    subprocess.run(["umount", str(where)], capture_output=True, check=False)


@contextlib.contextmanager
def _tmpfs(where: Path, options: str, skip: str) -> Iterator[Path]:
    """A tmpfs mounted on ``where`` for the block (skipped with ``skip`` where none can be)."""
    if not _mount(where, options):
        pytest.skip(skip)
    try:
        yield where
    finally:
        _umount(where)


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A folder nothing can be created in: mode bits for a user, a read-only mount for root
    (which ignores mode bits)."""
    where = tmp_path / "read-only"
    where.mkdir()
    if os.geteuid() != 0:
        where.chmod(0o555)
        yield where
        where.chmod(0o755)
        return
    with _tmpfs(where, "ro,size=64k", "root, and cannot mount a read-only tmpfs here"):
        yield where


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs with one page (4 KiB) left: a file can still be created there (the
    checks up front pass), a ~10 KB result line cannot be written whole."""
    where = tmp_path / "full"
    where.mkdir()
    with _tmpfs(where, "size=64k",
                "cannot mount a tmpfs here (the simulated full-disk tests still run)"):
        yield where


def _fill(where: Path, leave: int = 4096) -> None:
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 1024):
            pass
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    os.truncate(filler, filler.stat().st_size - leave)


def _earlier(out: Path, n: int = 2) -> bytes:
    """``n`` earlier results in ``out``; its bytes, which must come through unchanged."""
    sweepdata.write(out, [sweepdata.case("mlp", "serial", 1, repeat=r) for r in range(n)])
    return out.read_bytes()


# --- every output path, before any case starts ----------------------------------------------

def _unwritable(tmp_path: Path, read_only: Path) -> dict[str, str]:
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory\n")
    return {"nowhere": NOWHERE, "under-a-file": f"{a_file}/sub", "a-file": str(a_file),
            "read-only": f"{read_only}/sub"}


@pytest.mark.parametrize("place", ["nowhere", "under-a-file", "a-file", "read-only"])
@pytest.mark.parametrize("flag", ["--report", "--tensorboard"])
def test_an_output_folder_that_cannot_be_written_stops_run_before_any_case(
    tmp_path: Path, read_only_dir: Path, flag: str, place: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = _unwritable(tmp_path, read_only_dir)[place]
    out = tmp_path / "r.jsonl"
    code, line = _cli([*RUN, "--out", str(out), flag, path], capsys)
    assert code == 2
    assert line.startswith(f"parabench: error: {flag} {path}")
    assert "directory" in line or "cannot create it" in line or "cannot write in it" in line
    assert not out.exists(), "a case ran"


def test_report_and_compare_check_their_output_folder_first(
    tmp_path: Path, read_only_dir: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    results = tmp_path / "r.jsonl"
    _earlier(results)
    code, line = _cli(["report", str(results), "--out", f"{read_only_dir}/report"], capsys)
    assert (code, line.split(": cannot")[0]) == (
        2, f"parabench: error: --out {read_only_dir}/report")
    assert list(read_only_dir.iterdir()) == []
    # before the git worktrees and the rounds (nothing here is a git checkout of them)
    code, line = _cli(["compare", "--rerun", "HEAD", "--out-dir", NOWHERE], capsys)
    assert code == 2 and line.startswith(f"parabench: error: --out-dir {NOWHERE}: cannot create")


# --- a failure to write after the work: one line, exit 1, results kept ----------------------

@pytest.mark.slow
def test_a_report_that_cannot_be_written_after_the_cases_is_one_line_exit_1(
    tmp_path: Path, full_disk: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    _fill(full_disk)
    out = tmp_path / "r.jsonl"
    code, line = _cli([*RUN, "--out", str(out), "--report", str(full_disk / "report")], capsys)
    assert code == 1
    assert line.startswith(f"parabench: error: could not write the report in {full_disk}")
    assert "No space left on device" in line and f"the results in {out} are kept" in line
    [result] = read_results(out)
    assert result.status == "ok"


# --- appends are all or nothing --------------------------------------------------------------

def _full_disk_writes(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[int]:
    """Make writes to ``path`` behave like a full disk: the first writes half its bytes and
    returns the short count, the next raises ENOSPC. Other files write as usual."""
    real_write, calls = os.write, []
    target = path.stat() if path.exists() else None

    def write(fd: int, data: bytes) -> int:
        st = os.fstat(fd)
        mine = target is not None and (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino)
        if not mine:
            return real_write(fd, data)
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", write)
    return calls


def test_an_append_that_hits_a_full_disk_takes_its_bytes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Simulated (patched ``os.write``): a short write, then ENOSPC."""
    out = tmp_path / "r.jsonl"
    before = _earlier(out)
    calls = _full_disk_writes(monkeypatch, out)
    with pytest.raises(ResultWriteError, match=r"could not write the result of cnn/serial cpu "
                       r"w=1 t=\d+ bs=\S+ r5 to .*r\.jsonl \(No space left on device\); the "
                       r"results before it in the file are intact"):
        append_result(out, sweepdata.case("cnn", "serial", 1, repeat=5))
    assert len(calls) == 2, "the short write, then the rest: ENOSPC"
    assert out.read_bytes() == before, "a torn partial line was left behind"
    assert [r.repeat for r in read_results(out)] == [0, 1]


def test_an_append_whose_fsync_fails_is_not_left_in_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Simulated: the bytes reached the page cache but not the disk (EIO from fsync)."""
    out = tmp_path / "r.jsonl"
    before = _earlier(out)

    def fsync(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(ResultWriteError, match="Input/output error"):
        append_result(out, sweepdata.case("cnn", "serial", 1, repeat=5))
    assert out.read_bytes() == before


def test_an_append_on_a_really_full_filesystem_keeps_only_whole_lines(full_disk: Path) -> None:
    out = full_disk / "r.jsonl"
    before = _earlier(out)
    _fill(full_disk)
    big = sweepdata.case("cnn", "serial", 1, repeat=5, epochs=100)  # 8.8 KB: 4 KiB fit
    with pytest.raises(ResultWriteError, match=r"\(No space left on device\); the results "
                                                r"before it in the file are intact"):
        append_result(out, big)
    assert out.read_bytes() == before
    assert [r.repeat for r in read_results(out)] == [0, 1]


@pytest.mark.slow
@pytest.mark.parametrize("disk", ["real", "simulated"])
def test_a_full_disk_stops_the_run_with_one_line_and_earlier_results_intact(
    tmp_path: Path, disk: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest,
) -> None:
    import parabench.sweep.executor as runner

    where = request.getfixturevalue("full_disk") if disk == "real" else tmp_path
    out = where / "r.jsonl"
    before = _earlier(out)
    if disk == "real":
        _fill(where)
    else:
        _full_disk_writes(monkeypatch, out)
    started: list[str] = []
    real_run = runner.run_isolated
    monkeypatch.setattr(runner, "run_isolated",
                        lambda config, **kw: started.append(config.label()) or
                        real_run(config, **kw))

    code, line = _cli([*RUN, "--repeats", "2", "--out", str(out)], capsys)
    assert code == 1
    assert re.fullmatch(r"parabench: error: could not write the result of mlp/serial cpu w=1 "
                        rf"t=\d+ bs=\S+ r0 to {re.escape(str(out))} \(No space left on device\); "
                        r"the results before it in the file are intact; this one is not in it",
                        line), line
    assert len(started) == 1, "the run went on after a result was lost"
    assert out.read_bytes() == before
    assert [r.repeat for r in read_results(out)] == [0, 1]


# --- inputs no case could satisfy ------------------------------------------------------------

@pytest.mark.parametrize(("workload", "target", "valid"), [
    ("mlp", "2", "0 < Q <= 1"), ("mlp", "0", "0 < Q <= 1"), ("gpt", "1.5", "0 < Q <= 1"),
    ("conv_autoencoder", "-1", "Q > 0"), ("conv_autoencoder", "0", "Q > 0"),
])
def test_an_unreachable_target_quality_is_refused_before_any_case(
    tmp_path: Path, workload: str, target: str, valid: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from parabench.registry import workloads

    out = tmp_path / "r.jsonl"
    code, line = _cli(["run", "--workload", workload, "--method", "serial", "--profile",
                       "tiny", "--target-quality", target, "--out", str(out)], capsys)
    metric = workloads.get(workload).quality.name
    assert (code, line) == (2, f"parabench: error: --target-quality {target} is out of reach "
                               f"for {workload}, whose metric is {metric}; valid: {valid}")
    assert not out.exists()


def test_a_reachable_target_quality_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from parabench.cli import main

    out = tmp_path / "r.jsonl"
    for workload, target in [("mlp", "1"), ("conv_autoencoder", "0.02")]:
        assert main(["run", "--workload", workload, "--method", "serial", "--profile", "tiny",
                     "--target-quality", target, "--dry-run", "--out", str(out)]) == 0
    assert "error" not in capsys.readouterr().err


def test_max_epochs_below_one_is_refused_before_any_case(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "r.jsonl"
    code, line = _cli(["run", "--workload", "mlp", "--method", "serial", "--profile", "tiny",
                       "--target-quality", "0.5", "--max-epochs", "0", "--out", str(out)], capsys)
    assert code == 2 and "argument --max-epochs: 0 is not >= 1" in line
    assert not out.exists()


@pytest.mark.parametrize("workload", ["gpt", "cnn"])
def test_a_missing_data_dir_is_refused_before_any_case(
    tmp_path: Path, workload: str, capsys: pytest.CaptureFixture[str],
) -> None:
    missing, out = tmp_path / "no-such-data", tmp_path / "r.jsonl"
    code, line = _cli(["run", "--workload", workload, "--method", "serial", "--profile", "tiny",
                       "--epochs", "1", "--data-dir", str(missing), "--out", str(out)], capsys)
    assert (code, line) == (2, f"parabench: error: --data-dir {missing} does not exist (read "
                               f"by {workload}); give the directory or file that holds the "
                               "dataset")
    assert not out.exists(), "a case ran"
