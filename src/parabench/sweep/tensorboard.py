"""TensorBoard event files, one run directory per case: ``parabench run --tensorboard DIR``.

Usage::

    writer = TensorBoardLog("tb")        # ImportError naming the extra when tensorboard is absent
    writer.write(result)                 # DIR/<workload>/<method>-<device>-w<N>-bs<B>-r<R>/
    # then: tensorboard --logdir tb

Scalars per epoch (step = epoch, 1-based): ``loss``, ``epoch_s``, ``throughput``
(samples/s of that epoch), ``quality`` where per-epoch quality was recorded, and
``components/<name>``; per steady speed window (step = window, 1-based, the warm-up window
left out): ``window_throughput`` (samples/s of that window); once per case (step = last
epoch): ``quality/final``, ``samples_per_s`` (the steady windows' median where measured),
``samples_per_s_ci/low`` and ``/high`` (its 95 % CI, where recorded), ``peak_mb`` (PSS
sum, else RSS), ``peak_rss_mb``, ``peak_gpu_mb``, ``startup_s``. Runs that did not finish ok
still log what they measured. Records are written with TensorBoard's own protobufs and record
framing, directly, because its EventFileWriter imports TensorFlow when that is installed
(tens of seconds).
"""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path
from typing import Any

from parabench.analysis.figures import peak_memory
from parabench.case.result import Result
from parabench.identity import labelled_options


def _modules() -> tuple[Any, Any, Any]:
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter
    except ImportError as exc:
        raise ImportError(
            "--tensorboard needs the tensorboard package: pip install 'parabench[tensorboard]'"
        ) from exc
    return event_pb2, summary_pb2, RecordWriter


def run_name(r: Result) -> str:
    opts = "".join(f"-{k}={v}" for k, v in labelled_options((r.config or {}).get("options", {})))
    bs = "default" if r.batch_size is None else r.batch_size
    name = f"{r.method}-{r.device}-w{r.workers}-bs{bs}{opts}-r{r.repeat}"
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", name)


def scalars(r: Result) -> list[tuple[str, int, float]]:
    """(tag, step, value) for everything one result can plot."""
    out: list[tuple[str, int, float]] = []
    for i, loss in enumerate(r.loss, 1):
        out.append(("loss", i, loss))
    for i, t in enumerate(r.epoch_s, 1):
        out.append(("epoch_s", i, t))
        if r.samples_per_epoch and t > 0 and not (r.cut_short and i == len(r.epoch_s)):
            out.append(("throughput", i, r.samples_per_epoch / t))  # a cut epoch: no rate
    for i, q in enumerate(getattr(r, "epoch_quality", None) or [], 1):
        if q is not None:
            out.append(("quality", i, q))
    out += [("window_throughput", i, rate) for i, rate in enumerate(r.window_rates, 1)]
    for name, values in sorted(r.components.items()):
        out += [(f"components/{name}", i, v) for i, v in enumerate(values, 1)]
    last = max(len(r.epoch_s), 1)
    low, high = r.samples_per_s_ci or (None, None)
    once = {"quality/final": r.quality.value if r.quality else None,
            "samples_per_s": r.samples_per_s, "samples_per_s_ci/low": low,
            "samples_per_s_ci/high": high, "peak_mb": peak_memory([r])[0],
            "peak_rss_mb": r.peak_rss_mb,
            "peak_gpu_mb": r.peak_gpu_mb, "startup_s": r.startup_s}
    out += [(tag, last, float(v)) for tag, v in once.items() if v is not None]
    return [(tag, step, float(v)) for tag, step, v in out if v is not None]


class TensorBoardLog:
    def __init__(self, log_dir: str | Path) -> None:
        self.event_pb2, self.summary_pb2, self.RecordWriter = _modules()
        self.log_dir = Path(log_dir)

    def write(self, r: Result) -> Path:
        """One event file for the case; returns its run directory."""
        run_dir = self.log_dir / re.sub(r"[^A-Za-z0-9_.-]+", "_", r.workload) / run_name(r)
        run_dir.mkdir(parents=True, exist_ok=True)
        now = time.time()
        path = run_dir / f"events.out.tfevents.{now:.6f}.{socket.gethostname()}"
        writer = self.RecordWriter(path.open("wb"))
        try:
            writer.write(self.event_pb2.Event(wall_time=now, file_version="brain.Event:2")
                         .SerializeToString())
            for tag, step, value in scalars(r):
                summary = self.summary_pb2.Summary(
                    value=[self.summary_pb2.Summary.Value(tag=tag, simple_value=value)])
                writer.write(self.event_pb2.Event(wall_time=now, step=step, summary=summary)
                             .SerializeToString())
        finally:
            writer.close()
        return run_dir
