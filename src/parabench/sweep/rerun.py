"""Interleaved A/B reruns: ``parabench compare --rerun BASE_REF [NEW_REF] --rounds N``.

Usage::

    root = git_root(CHECKOUT)                   # ConfigError: not a git repository
    base = resolve_ref(root, "HEAD")            # ConfigError: unknown ref
    check_same_dependencies(root, base, None)   # ConfigError naming what differs
    schedule(2)            # [(1, 'base'), (1, 'new'), (2, 'new'), (2, 'base')]: ABBA
    remove_stale_checkouts()   # killed reruns' worktrees (checkouts does this first too)
    with checkouts(root, {"base": base, "new": None}) as trees:  # temp worktree, removed after
        rounds = run_rounds(trees, ["--workload", "mlp", "--method", "serial", "--profile",
                                    "tiny", "--epochs", "1"], rounds=2, out_dir=Path("rounds"))
    cmp = compare(rounds.base_results(), rounds.new_results(), 0.10)  # a round = one run a side
    for paired in round_ratios(rounds):   # the rounds, paired: new/base in each
        print(paired.text())

BASE_REF and NEW_REF are checked out as detached git worktrees in a temporary directory that
is removed when the run ends, also on a failure, Ctrl-C or SIGTERM. Without NEW_REF the NEW
side is the working tree as it is (uncommitted edits included: "did my change slow it down?");
give ``HEAD`` to compare commits only.

**Killed hard.** A rerun killed by SIGKILL cleans up nothing itself, so: every process it
starts gets SIGTERM from the kernel when it dies (Linux, ``PR_SET_PDEATHSIG``; a round's
``parabench run`` then stops its case, whose process group also dies with its runner, see
``parabench.case.execute.die_with_runner``); and its tree folder is named
``parabench-rerun-trees-<pid>-*``, so the next rerun finds those of dead pids (``checkouts``
does, first), unregisters their worktrees from their repository, deletes them and says so on
stderr.

**Dependencies.** Both versions run under this interpreter, each with its own ``src`` first on
``PYTHONPATH`` (checked: each side's ``import parabench`` must come from its tree), so they
share the installed packages. That is only fair when the two ``pyproject.toml`` declare the
same dependencies (``dependencies``, ``optional-dependencies``, ``requires-python``); when
they do not, the rerun refuses (exit 2) and says what differs: building a virtual environment
per side would take minutes and the network, and a dependency change is then part of what
is compared, which a shared interpreter cannot show.

**Schedule.** Rounds alternate the order of the sides, ABBA (round 1 base then new, round 2
new then base, ...): a linear drift of the machine (warming up, a background job winding
down) then favours neither side, and neither side always runs first after the other's
process. Each round runs the selected cases once per side, as that version's
``parabench run --out ROUND_FILE`` in a subprocess; a round is one run (repeat) per side, so
``parabench compare`` judges the rounds' results like repeats of a case, and the per-round
ratios (``RoundRatios``, paired by round) are shown beside the verdict.

**Nothing lost.** Every round's results file, and the run's stdout beside it, stay in the
output directory (``--out-dir``; default a new ``parabench-rerun-*`` directory here), which
is printed first and last.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from parabench.case.result import Result, read_results
from parabench.config import ConfigError
from parabench.core.tempdirs import stale_dirs

SIDES = ("base", "new")
ORDERS = ("abba", "abab")
#: exit codes of ``parabench run`` that end the rerun: usage error, Ctrl-C, SIGTERM
FATAL_EXITS = (2, 130, 143)
#: the temporary folder of a rerun's worktrees: ``<TREES_PREFIX><pid>-<random>``
TREES_PREFIX = "parabench-rerun-trees-"


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          check=False)


def git_root(path: str | Path = ".") -> Path:
    """The top of the git checkout holding ``path``; ConfigError when there is none."""
    if shutil.which("git") is None:
        raise ConfigError("--rerun needs git on PATH")
    done = _git(Path(path), "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise ConfigError(f"--rerun needs a git checkout of parabench; {Path(path).resolve()} "
                          "is not in a git repository")
    root = Path(done.stdout.strip())
    if not (root / "src" / "parabench").is_dir():
        raise ConfigError(f"--rerun: {root} is a git repository but not a parabench checkout "
                          "(no src/parabench)")
    return root


def resolve_ref(root: Path, ref: str) -> str:
    """The commit ``ref`` names; ConfigError with the ref when git does not know it."""
    done = _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0 or not done.stdout.strip():
        raise ConfigError(f"--rerun: unknown git ref {ref!r} in {root} (a branch, tag or "
                          "commit, e.g. HEAD~1 or main)")
    return done.stdout.strip()


def _pyproject(root: Path, commit: str | None) -> str:
    if commit is None:
        path = root / "pyproject.toml"
        return path.read_text() if path.is_file() else ""
    done = _git(root, "show", f"{commit}:pyproject.toml")
    return done.stdout if done.returncode == 0 else ""


def declared_dependencies(pyproject_text: str) -> dict[str, object]:
    """What a version needs installed: its dependencies, extras and Python, from
    ``pyproject.toml`` (the whole text where no TOML reader is at hand)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        return {"pyproject.toml": pyproject_text}
    project = tomllib.loads(pyproject_text).get("project", {}) if pyproject_text else {}
    extras = project.get("optional-dependencies", {})
    return {"dependencies": sorted(project.get("dependencies", [])),
            "requires-python": project.get("requires-python"),
            **{f"extra {k}": sorted(v) for k, v in sorted(extras.items())}}


def dependency_differences(base: Mapping[str, object], new: Mapping[str, object]) -> list[str]:
    """One line per declared item that differs between the two versions."""
    out = []
    for key in sorted(set(base) | set(new)):
        if base.get(key) != new.get(key):
            out.append(f"{key}: base {base.get(key, 'absent')!r}, new {new.get(key, 'absent')!r}")
    return out


def check_same_dependencies(root: Path, base: str | None, new: str | None) -> None:
    """ConfigError when the two versions declare different dependencies (see the module doc)."""
    diff = dependency_differences(declared_dependencies(_pyproject(root, base)),
                                  declared_dependencies(_pyproject(root, new)))
    if diff:
        raise ConfigError("--rerun runs both versions on this interpreter's packages, but "
                          "their pyproject.toml dependencies differ (" + "; ".join(diff) +
                          "); compare results files of separate installs instead")


def schedule(rounds: int, order: str = "abba") -> list[tuple[int, str]]:
    """(round, side) in running order: ``abab`` base first every round; ``abba`` base first
    in odd rounds and new first in even ones."""
    if order not in ORDERS:
        raise ConfigError(f"--order {order!r} is not valid; valid: {', '.join(ORDERS)}")
    out = []
    for i in range(1, rounds + 1):
        sides = SIDES if order == "abab" or i % 2 else SIDES[::-1]
        out.extend((i, side) for side in sides)
    return out


def _unregister_worktree(tree: Path) -> None:
    """Remove ``tree`` and its entry in the repository it is a worktree of (its ``.git`` file
    names it); ``--force`` twice: also one a killed ``git worktree add`` left locked."""
    try:  # gitdir: <repo>/.git/worktrees/<name>, the repository two levels up
        gitdir = tree / (tree / ".git").read_text().removeprefix("gitdir:").strip()
        git = ["git", "--git-dir", str(gitdir.parent.parent), "worktree"]
    except OSError:
        git = None
    if git:
        subprocess.run([*git, "remove", "--force", "--force", str(tree)], capture_output=True,
                       check=False)
    shutil.rmtree(tree, ignore_errors=True)
    if git:
        subprocess.run([*git, "prune"], capture_output=True, check=False)


def remove_stale_checkouts(tmp_root: str | Path | None = None) -> list[Path]:
    """Remove the tree folders of reruns that died without cleaning up (SIGKILL): this user's
    ``parabench-rerun-trees-<pid>-*`` in the temporary directory whose pid is dead, and their
    worktrees from their repositories' registries; return the worktrees removed."""
    removed = []
    for folder in stale_dirs(tmp_root, TREES_PREFIX):
        for tree in sorted(p for p in folder.iterdir() if p.is_dir()):
            _unregister_worktree(tree)
            removed.append(tree)
        shutil.rmtree(folder, ignore_errors=True)
    return removed


@contextlib.contextmanager
def checkouts(root: Path, commits: Mapping[str, str | None]) -> Iterator[dict[str, Path]]:
    """side -> source tree: a detached worktree per commit in a temporary directory (None: the
    working tree ``root`` itself); the worktrees are removed on the way out, however left, and
    those of killed reruns before (one line on stderr names them)."""
    if stale := remove_stale_checkouts():
        print(f"parabench: removed {len(stale)} stale rerun checkout"
              f"{'s' if len(stale) > 1 else ''} of a killed run: "
              + ", ".join(map(str, stale)), file=sys.stderr, flush=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{TREES_PREFIX}{os.getpid()}-"))
    made: list[Path] = []
    try:
        trees = {}
        for side, commit in commits.items():
            if commit is None:
                trees[side] = root
                continue
            tree = tmp / side
            done = _git(root, "worktree", "add", "--detach", str(tree), commit)
            if done.returncode != 0:
                raise ConfigError(f"--rerun: git worktree add {commit[:12]} failed: "
                                  f"{done.stderr.strip()}")
            made.append(tree)
            trees[side] = tree
        yield trees
    finally:
        for tree in made:
            _git(root, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(tmp, ignore_errors=True)
        _git(root, "worktree", "prune")


def side_env(tree: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with ``tree/src`` first on PYTHONPATH (plugins' folders
    given there stay, after it), plus ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(tree / "src"), env.get("PYTHONPATH", "")) if p)
    env.update(extra or {})
    return env


def dies_with_this_process() -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send the child SIGTERM when this process dies, also
    by SIGKILL (Linux ``PR_SET_PDEATHSIG``, kept across exec); None elsewhere. git commands go
    without: they end in moments, and a killed ``worktree add`` would leave a locked entry."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    prctl, parent = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()

    def arm() -> None:
        prctl(1, int(signal.SIGTERM))  # 1: PR_SET_PDEATHSIG
        if os.getppid() != parent:  # this process died before prctl took effect
            os._exit(143)

    return arm


def check_imports_from(tree: Path, env: Mapping[str, str]) -> None:
    """ConfigError unless ``import parabench`` under ``env`` loads ``tree``'s copy (an
    installed copy that shadowed it would compare a version with itself)."""
    done = subprocess.run([sys.executable, "-c", "import parabench; print(parabench.__file__)"],
                          env=dict(env), capture_output=True, text=True, check=False,
                          preexec_fn=dies_with_this_process())
    where = Path(done.stdout.strip() or "?").resolve()
    if done.returncode != 0 or (tree / "src").resolve() not in where.parents:
        raise ConfigError(f"--rerun: import parabench with {tree}/src first on PYTHONPATH "
                          f"loads {where} ({done.stderr.strip()[-200:] or 'another copy'})")


@dataclass
class Rounds:
    """The rounds' results files, by side, in round order."""

    out_dir: Path
    files: dict[str, list[Path]] = field(default_factory=lambda: {s: [] for s in SIDES})
    exits: list[tuple[int, str, int]] = field(default_factory=list)

    def results(self, side: str) -> list[Result]:
        return [r for path in self.files[side] if path.is_file() for r in read_results(path)]

    def base_results(self) -> list[Result]:
        return self.results("base")

    def new_results(self) -> list[Result]:
        return self.results("new")


def round_file(out_dir: Path, index: int, side: str) -> Path:
    return out_dir / f"round{index:02d}-{side}.jsonl"


def _run_side(cmd: list[str], env: Mapping[str, str], log: Path, progress: bool) -> int:
    """The version's ``parabench run``: stdout (its table) to ``log``, stderr (progress) here
    (with ``progress``; else to ``log`` too); the child is stopped if this process is
    interrupted or terminated, and dies with it if it is killed."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, env=dict(env), stdout=out,
                                stderr=None if progress else subprocess.STDOUT,
                                preexec_fn=dies_with_this_process())
        try:
            return proc.wait()
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def preflight(trees: Mapping[str, Path], selection: Sequence[str], out_dir: Path,
              envs: Mapping[str, Mapping[str, str]]) -> None:
    """Each version checks the selection itself (``run --dry-run``) before round 1."""
    for side, tree in trees.items():
        check_imports_from(tree, envs[side])
        cmd = [sys.executable, "-m", "parabench", "run", *selection, "--dry-run",
               "--out", str(out_dir / f"dry-run-{side}.jsonl")]
        done = subprocess.run(cmd, env=dict(envs[side]), capture_output=True, text=True,
                              check=False, preexec_fn=dies_with_this_process())
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise ConfigError(f"--rerun: the {side} version refuses the selection: {last}")


def run_rounds(trees: Mapping[str, Path], selection: Sequence[str], *, rounds: int,
               out_dir: Path, order: str = "abba",
               env: Mapping[str, Mapping[str, str]] | None = None,
               say: Callable[[str], None] = print, progress: bool = True) -> Rounds:
    """Run the schedule; ``env``: extra variables per side (the gate harness injects a
    slowdown into one side this way); ``progress``: the runs' progress lines on stderr.
    Stops at the first run that exits 2, 130 or 143."""
    out_dir.mkdir(parents=True, exist_ok=True)
    envs = {s: side_env(trees[s], (env or {}).get(s)) for s in SIDES}
    preflight(trees, selection, out_dir, envs)
    done = Rounds(out_dir=out_dir)
    for index, side in schedule(rounds, order):
        path = round_file(out_dir, index, side)
        path.unlink(missing_ok=True)  # a rerun into the same directory starts afresh
        say(f"round {index}/{rounds} {side} ({trees[side]}): parabench run "
            f"{' '.join(selection)} --out {path}")
        cmd = [sys.executable, "-m", "parabench", "run", *selection, "--out", str(path)]
        rc = _run_side(cmd, envs[side], path.with_suffix(".log"), progress)
        done.files[side].append(path)
        done.exits.append((index, side, rc))
        if rc == 2:
            raise ConfigError(f"--rerun: round {index} {side} exited 2 (a usage error); see "
                              f"{path.with_suffix('.log')}")
        if rc in FATAL_EXITS:  # the child was interrupted or terminated: so is the rerun
            raise KeyboardInterrupt
    return done


@dataclass(frozen=True)
class RoundRatios:
    """Per case: NEW's throughput / BASE's in each round (paired by round)."""

    case: str
    ratios: tuple[float, ...]

    def text(self) -> str:
        med = statistics.median(self.ratios)
        slower = sum(r < 1 for r in self.ratios)
        return (f"{self.case}: new/base by round " + " ".join(f"{r:.3f}" for r in self.ratios)
                + f"; median {med:.3f}, new slower in {slower}/{len(self.ratios)} rounds")


def round_ratios(rounds: Rounds) -> list[RoundRatios]:
    """The paired view: each round's ratio for every case both sides ran ok in it."""
    from parabench.identity import CaseId
    from parabench.workloads.version import versions_differ

    by_case: dict[tuple, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
    labels: dict[tuple, str] = {}
    versions: dict[tuple, dict[str, list[str | None]]] = defaultdict(lambda: defaultdict(list))
    for side in SIDES:
        for index, path in enumerate(rounds.files[side], start=1):
            for r in (read_results(path) if path.is_file() else []):
                if r.status == "ok" and r.samples_per_s:
                    key = CaseId.recorded(r).work
                    by_case[key][index][side] = float(r.samples_per_s)
                    labels[key] = CaseId.recorded(r).group.label()
                    versions[key][side].append(r.workload_version)
    out = []
    for key in sorted(by_case):
        if versions_differ(versions[key]["base"], versions[key]["new"]):
            continue  # a changed workload: compare says so, its rounds are not a ratio
        pairs = [v["new"] / v["base"] for _, v in sorted(by_case[key].items())
                 if "new" in v and "base" in v and v["base"] > 0]
        if pairs:
            out.append(RoundRatios(case=labels[key], ratios=tuple(pairs)))
    return out
