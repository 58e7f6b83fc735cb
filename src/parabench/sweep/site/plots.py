"""The report's figures, one set per (workload, device, profile) scope, drawn with matplotlib.

Usage::

    figs = scope_figures(scope_candidates, scope_results)   # name -> Figure (not saved)
    save(figs, out_dir, prefix="cnn-cpu-tiny")              # PNG files, figures closed

Figures: ``scaling`` (speedup over serial, or throughput without a serial case, vs workers
per method, with the ideal line, 95 % CI error bars of the throughput
(:func:`throughput_errors`) and, for >= 3 worker counts, an Amdahl prediction at twice
the largest count), ``components`` (stacked time components per configuration), ``memory``
(peak RAM, and GPU when recorded), ``curves`` (loss, and quality when recorded, per epoch
against serial), and, when the results hold such sweeps, ``batch`` (throughput and memory vs
batch size, auto-picked batches starred) and ``options`` (throughput per DataLoader /
precision setting). Uses the Agg backend: no display is needed.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from parabench.analysis.ratios import is_baseline, throughput_speedup
from parabench.analysis.recommend import Candidate, baseline_for
from parabench.analysis.stats import amdahl_fit, median_ci
from parabench.case.result import Result

COMPONENT_ORDER = ("data", "forward", "backward", "optimizer", "communication", "idle")
COLORS = {"data": "#8c8c8c", "forward": "#4c72b0", "backward": "#dd8452",
          "optimizer": "#55a868", "communication": "#c44e52", "idle": "#eeeeee"}
DPI = 72


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError("the report needs matplotlib: pip install 'parabench[report]'") from exc
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _short(c: Candidate) -> str:
    """``ddp 2x1 bs64 compile=True``: the table's workers (processes x threads) and what varies."""
    label = f"{c.method} {c.workers}x{c.threads}"
    if c.batch != "-":
        label += f" bs{c.batch}"
    return label + ("" if c.options == "-" else f" {c.options}")


def _batch_order(batch: str) -> tuple[int, str]:
    return (int(batch), "") if batch.isdigit() else (0, batch)


def _series(cands: list[Candidate]) -> dict[str, list[Candidate]]:
    """Method (plus batch/options when they vary) -> its candidates by worker count."""
    vary = len({(c.batch, c.options) for c in cands}) > 1
    out: dict[str, list[Candidate]] = defaultdict(list)
    for c in sorted(cands, key=lambda c: (c.method, _batch_order(c.batch), c.options, c.workers)):
        name = c.method if not vary else f"{c.method} bs{c.batch}" + (
            "" if c.options == "-" else f" {c.options}")
        out[name].append(c)
    return out


def throughput_errors(cands: list[Candidate],
                      ref: float | list[float] = 1.0) -> list[list[float]]:
    """Asymmetric error bars [[below...], [above...]] of each candidate's throughput / its ref
    (one for all, or one per candidate): the 95 % bootstrap CI of its median over its samples
    (steady windows of one run, or the repeats' figures:
    :func:`parabench.analysis.stats.throughput_samples`); 0 where none."""
    below, above = [], []
    per = ref if isinstance(ref, list) else [ref] * len(cands)
    for c, r in zip(cands, per, strict=True):
        ci = median_ci(c.samples.values)
        lo, hi = ci if ci else (c.throughput, c.throughput)
        below.append(max(0.0, (c.throughput - lo) / r))
        above.append(max(0.0, (hi - c.throughput) / r))
    return [below, above]


def _error_bars(ax: Any, xs: list[Any], ys: list[float], yerr: list[list[float]],
                color: str) -> None:
    """Vertical CI bars only (a LineCollection: the axes' lines stay the data series)."""
    ax.errorbar(xs, ys, yerr=yerr, fmt="none", ecolor=color, elinewidth=1, capsize=0)


def scaling_figure(cands: list[Candidate]) -> Any:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8.4, 3.8))
    has_serial = any(is_baseline(c.method) for c in cands)
    max_w = max(c.workers for c in cands)
    for name, series in _series(cands).items():
        # each point against its own baseline, as the table's speedup (serial with the same
        # total cores): serial at 1 and 2 threads are both 1.0, not a vertical line at 1 worker
        first = baseline_for(series[0], cands) if has_serial else None
        fallback = first.throughput if first else series[0].throughput / series[0].workers
        refs = [b.throughput if has_serial and (b := baseline_for(c, cands)) else fallback
                for c in series]
        xs = [c.workers for c in series]
        ys = [throughput_speedup(c.throughput, r) for c, r in zip(series, refs, strict=True)]
        (line,) = ax.plot(xs, ys, marker="o", label=name)
        _error_bars(ax, xs, ys, throughput_errors(series, refs), line.get_color())
        ref = refs[-1]
        fit = amdahl_fit({c.workers: 1.0 / c.throughput for c in series})
        if fit is not None:
            n = fit.predict_workers
            y = throughput_speedup(1.0 / fit.time(n), ref)
            ax.plot([xs[-1], n], [ys[-1], y], linestyle="--", marker="o", fillstyle="none",
                    color=line.get_color(),
                    label=f"{name} Amdahl prediction @{n} (serial fraction "
                          f"{fit.serial_fraction:.2f})")
            max_w = max(max_w, n)
    ax.plot([1, max_w], [1, max_w], color="black", linewidth=0.8, linestyle=":",
            label="ideal (linear)")
    ax.set_xticks(sorted({c.workers for c in cands} | {max_w}))
    ax.set_xlabel("workers")
    ax.set_ylabel("speedup over serial" if has_serial else "throughput / (per-worker rate)")
    ax.set_title("Scaling" + ("" if has_serial else " (no serial case: self-relative)"))
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # off the data
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _components(c: Candidate) -> dict[str, float]:
    per: dict[str, list[float]] = defaultdict(list)
    for r in c.results:
        for name, value in r.median_components().items():
            per[name].append(value)
    return {k: statistics.median(v) for k, v in per.items()}


def components_figure(cands: list[Candidate]) -> Any | None:
    data = [(c, comps) for c in sorted(cands, key=lambda c: (c.method, c.workers))
            if (comps := _components(c))]
    if not data:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    names = sorted({k for _, comps in data for k in comps},
                   key=lambda k: (COMPONENT_ORDER.index(k) if k in COMPONENT_ORDER else 99, k))
    labels = [_short(c) for c, _ in data]
    bottom = [0.0] * len(data)
    for name in names:
        heights = [comps.get(name, 0.0) for _, comps in data]
        ax.bar(labels, heights, bottom=bottom, label=name, color=COLORS.get(name))
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_ylabel("seconds per epoch (median of steady epochs)")
    ax.set_title("Time components")
    ax.legend(fontsize=7, loc="upper right")  # "best" is slow on big plots
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    fig.tight_layout()
    return fig


def memory_figure(cands: list[Candidate]) -> Any | None:
    """Peak RAM (and GPU) per configuration, one horizontal bar each (long labels stay readable)."""
    data = sorted((c for c in cands if c.peak_mb is not None),
                  key=lambda c: (c.method, c.workers, c.threads, c.batch, c.options),
                  reverse=True)  # barh draws bottom-up: the first configuration on top
    if not data:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, max(2.4, 0.9 + 0.28 * len(data))))
    labels = [_short(c) for c in data]
    gpu = any(c.peak_gpu_mb for c in data)
    height = 0.4 if gpu else 0.7
    ys = list(range(len(data)))
    ax.barh([y + (height / 2 if gpu else 0) for y in ys], [c.peak_mb for c in data],
            height=height, label="peak RAM (PSS, all processes)")
    if gpu:
        ax.barh([y - height / 2 for y in ys], [c.peak_gpu_mb or 0.0 for c in data],
                height=height, label="peak GPU (max_memory_allocated)")
    ax.set_yticks(ys, labels, fontsize=7)
    ax.set_title("Peak memory per configuration")
    if gpu:
        ax.set_xlabel("MB")
        ax.legend(fontsize=7, loc="lower right")  # "best" is slow on big plots
    else:  # one series: an axis label instead of a legend that hides bars
        ax.set_xlabel("MB, peak RAM (PSS summed over all processes; RSS where not recorded)")
    fig.tight_layout()
    return fig


def curves_figure(results: list[Result]) -> Any | None:
    ok = sorted((r for r in results if r.status == "ok" and r.loss and r.repeat == 0),
                key=lambda r: (not is_baseline(r.method), r.method, r.workers))
    if not ok:
        return None
    plt = _pyplot()
    quality = [r for r in ok if any(q is not None for q in getattr(r, "epoch_quality", []))]
    fig, axes = plt.subplots(1, 2 if quality else 1, figsize=(6.4 if not quality else 9, 3.4),
                             squeeze=False)
    ax = axes[0][0]
    for r in ok[:12]:  # more lines than this are unreadable
        serial = is_baseline(r.method)
        label = f"{r.method} w{r.workers}" + ("" if r.batch_size is None else f" bs{r.batch_size}")
        # serial as a wide grey band underneath: methods that match it run inside the band
        style = (dict(color="black", linewidth=5, alpha=0.3, zorder=1) if serial
                 else dict(linewidth=1.2, zorder=2))
        ax.plot(range(1, len(r.loss) + 1), r.loss, label=label, marker=".", **style)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss")
    ax.set_title("Learning curves (loss)")
    ax.legend(fontsize=7, loc="upper right")  # "best" is slow on big plots
    if quality:
        qa = axes[0][1]
        for r in quality[:12]:
            ttt, per = r.time_to_target, r.samples_per_epoch
            points = (list(zip([s / per for s in ttt.eval_samples], ttt.eval_quality,
                               strict=True))
                      if ttt and ttt.eval_samples and per  # every evaluation, mid-epoch too
                      else list(enumerate(r.epoch_quality, 1)))
            qa.plot([x for x, q in points if q is not None],
                    [q for _, q in points if q is not None], marker=".",
                    label=f"{r.method} w{r.workers}",
                    color="black" if is_baseline(r.method) else None)
        qa.xaxis.get_major_locator().set_params(integer=True)
        qa.set_xlabel("epoch")
        qa.set_ylabel(quality[0].quality.name if quality[0].quality else "quality")
        qa.set_title("Held-out quality (per epoch, or each evaluation)")
        qa.legend(fontsize=7, loc="lower right")  # quality rises: keep the top clear
    fig.tight_layout()
    return fig


def batch_figure(cands: list[Candidate]) -> Any | None:
    batches = {c.batch for c in cands if c.batch.isdigit()}
    if len(batches) < 2:
        return None
    plt = _pyplot()
    fig, (ax, mx) = plt.subplots(1, 2, figsize=(9, 3.4))
    by: dict[str, list[Candidate]] = defaultdict(list)
    for c in cands:
        if c.batch.isdigit():
            by[f"{c.method} w{c.workers}"].append(c)
    for name, cs in sorted(by.items()):
        cs.sort(key=lambda c: int(c.batch))
        xs = [int(c.batch) for c in cs]
        (line,) = ax.plot(xs, [c.throughput for c in cs], marker="o", label=name)
        _error_bars(ax, xs, [c.throughput for c in cs], throughput_errors(cs), line.get_color())
        mx.plot(xs, [c.peak_mb or 0 for c in cs], marker="o", label=name,
                color=line.get_color())
        auto = [c for c in cs if any(r.config.get("batch_size") == "auto" for r in c.results)]
        if auto:
            ax.plot([int(c.batch) for c in auto], [c.throughput for c in auto], marker="*",
                    markersize=14, linestyle="none", color=line.get_color(),
                    label=f"{name} auto-picked batch")
    for a, ylabel, title in ((ax, "samples/s", "Throughput vs batch size"),
                             (mx, "peak RAM MB", "Peak memory vs batch size")):
        a.set_xscale("log", base=2)
        a.set_xticks(sorted(int(b) for b in batches), [str(b) for b in
                                                       sorted(int(b) for b in batches)])
        a.set_xlabel("global batch size")
        a.set_ylabel(ylabel)
        a.set_title(title)
        a.legend(fontsize=7, loc="upper left")  # both rise with the batch
    fig.tight_layout()
    return fig


def options_figure(cands: list[Candidate]) -> Any | None:
    if len({c.options for c in cands}) < 2:
        return None
    plt = _pyplot()
    data = sorted(cands, key=lambda c: (c.method, c.workers, c.options))
    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    ax.bar([_short(c) for c in data], [c.throughput for c in data],
           yerr=throughput_errors(data), capsize=3)
    ax.set_ylabel("samples/s (median, 95 % CI)")
    ax.set_title("Throughput per option setting (DataLoader, precision, ...)")
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    fig.tight_layout()
    return fig


def scope_figures(cands: list[Candidate], results: list[Result]) -> dict[str, Any]:
    """Every figure that has data for this scope, by name, in page order."""
    figs = {"scaling": scaling_figure(cands) if cands else None,
            "components": components_figure(cands), "memory": memory_figure(cands),
            "curves": curves_figure(results), "batch": batch_figure(cands),
            "options": options_figure(cands)}
    return {name: fig for name, fig in figs.items() if fig is not None}


def save(figs: dict[str, Any], out_dir: Path, prefix: str) -> dict[str, Path]:
    """Write each figure as ``{prefix}-{name}.png`` and close it."""
    plt = _pyplot()
    paths = {}
    for name, fig in figs.items():
        path = out_dir / f"{prefix}-{name}.png"
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
        paths[name] = path
    return paths
