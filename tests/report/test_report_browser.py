"""report.html in a real browser (headless Chromium): the recommendation shows without scrolling.

Skipped when no Chromium is installed (``apt-get install chromium``). The page itself has no
scripts; the test measures a copy with one appended script that writes the recommendation
box's position into the DOM, which ``--dump-dom`` then prints.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from sweepdata import case, sweep

pytestmark = pytest.mark.cpu

WIDTH, HEIGHT = 1280, 800
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", f"--window-size={WIDTH},{HEIGHT}"]
MEASURE = """<script>
const box = document.getElementById('recommendation').getBoundingClientRect();
const p = document.createElement('pre'); p.id = 'measured';
p.textContent = `rec-top=${box.top} rec-bottom=${box.bottom} viewport=${innerHeight}` +
  ` offline-images=${[...document.images].every(i => i.complete && i.naturalWidth > 0)}`;
document.body.appendChild(p);
</script></body>"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    pytest.skip("no Chromium here (apt-get install chromium)")


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


@pytest.mark.slow
def test_the_recommendation_is_visible_without_scrolling(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    browser = _chromium()
    from parabench.sweep.site import write_report

    results = sweep(workloads=("cnn", "mlp"), methods=("serial", "ddp", "fsdp", "pipeline"),
                    workers=(1, 2, 4))
    results.append(case("cnn", "fedavg", 4, broken=True, slow=0.4))
    files = write_report(results, tmp_path / "report", sources=["crafted.jsonl"])
    measured = tmp_path / "measured.html"
    measured.write_text(files.html.read_text().replace("</body>", MEASURE))

    def chrome(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([browser, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                               *args], capture_output=True, text=True, timeout=120)

    dom = chrome("--dump-dom", measured.as_uri()).stdout
    found = re.search(r"rec-top=([\d.]+) rec-bottom=([\d.]+) viewport=(\d+) "
                      r"offline-images=(\w+)", dom)
    assert found, dom[-2000:]
    top, bottom, viewport = float(found[1]), float(found[2]), int(found[3])
    # the viewport is the window less the browser's own frame (657 of 800 px seen here)
    assert viewport > HEIGHT // 2 and 0 <= top < bottom <= viewport  # above the fold
    assert found[4] == "true"  # every embedded plot decoded with no network
    shot = tmp_path / "report.png"
    chrome(f"--screenshot={shot}", files.html.as_uri())
    assert _png_size(shot)[0] == WIDTH
