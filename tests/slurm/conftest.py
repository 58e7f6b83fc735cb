"""A real one-node SLURM for the executor's tests, started by ``scripts/slurm_local.sh``.

Where it cannot start (no root, no apt), the tests skip with the script's reason; with
``PARABENCH_REQUIRE_SLURM=1`` (``.ci/run`` sets it) they fail instead: CI must not skip them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm_local.sh"


@pytest.fixture(scope="session")
def slurm() -> None:
    """The local cluster, started (``start`` is idempotent: a running one is kept)."""
    try:
        done = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True,
                              timeout=600, stdin=subprocess.DEVNULL)
        ok, said = done.returncode == 0, (done.stderr or done.stdout).strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        ok, said = False, str(exc)
    if not ok:
        why = f"the local SLURM did not start: {said.splitlines()[-1] if said else '?'}"
        if os.environ.get("PARABENCH_REQUIRE_SLURM") == "1":
            pytest.fail(why + "\n" + said[-4000:])
        pytest.skip(why)
