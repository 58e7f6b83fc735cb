"""``parabench list`` and ``parabench env``: what is registered, what can run here.

Usage::

    parabench list [--json]     # workloads, then methods grouped by family, one line each
    parabench env [--json]      # OS, CPU, RAM, torch/CUDA, GPUs, MPI, Java, engines, threads
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from parabench.cli.common import EXIT_OK


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="workloads and methods, and what can run here")
    p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("env", help="system / runtime summary")
    p.add_argument("--json", action="store_true", help="machine-readable output")


#: ``parabench list``'s width: every line fits it (a description is cut, ``--json`` has it all)
LIST_WIDTH = 120


#: headings of the methods that train one workload family (another family: its own name)
FAMILY_TITLES = {"torch": "Training methods", "estimator": "Random-forest engines"}


def method_group(method: Any, workloads: Sequence[Any]) -> tuple[int, str]:
    """(order, heading) of the group ``parabench list`` shows ``method`` in, derived from its
    declarations: a method of several families (serial) is a baseline of them all; a peer
    library (``peer``) and TensorFlow's methods (torch workloads, ``requires`` tf) stand apart
    from the family's own; the rest by the family they train (``families``), its workloads in
    brackets (a family of one workload: its name)."""
    families = sorted(method.families)
    if len(families) != 1:
        title = "Baseline" if method.parity == "baseline" else "Methods"
        every = {w.family for w in workloads} <= method.families
        return 0, f"{title} ({'every workload' if every else ', '.join(families)})"
    family = families[0]
    names = [w.name for w in workloads if w.family == family]
    trains = names[0] if len(names) == 1 else family
    if method.peer:
        return 4, f"Peers ({trains})"
    if family == "torch" and "tf" in method.requires:
        return 2, f"TensorFlow methods ({trains}, compared with {method.baseline_method})"
    order = {"torch": 1, "estimator": 3}.get(family, 5)
    return order, f"{FAMILY_TITLES.get(family, f'{family} methods')} ({trains})"


def _fit(line: str, width: int = LIST_WIDTH) -> str:
    return line if len(line) <= width else line[: width - 3].rstrip() + "..."


def list_command(args: argparse.Namespace) -> int:
    """``parabench list [--json]``: workloads, then methods grouped by family (one line
    each: whether it runs here per device, a footnote saying why not), within 120 columns."""
    import textwrap

    from parabench.registry import methods, workloads

    wls = list(workloads)
    group_of = {m.name: method_group(m, wls) for m in methods}
    data = {
        "workloads": [
            {"name": w.name, "family": w.family, "quality": w.quality.name,
             "description": w.description}
            for w in wls
        ],
        "methods": [
            {"name": m.name, "description": m.description, "devices": list(m.devices),
             "requires": sorted(m.requires), "families": sorted(m.families), "peer": m.peer,
             "group": group_of[m.name][1],
             "runnable": {d: m.unavailable(d) is None for d in m.devices},
             "reason": {d: r for d in m.devices if (r := m.unavailable(d))}}
            for m in methods
        ],
    }
    if args.json:
        print(json.dumps(data, indent=2))
        return EXIT_OK
    names = [w["name"] for w in data["workloads"]] + [m["name"] for m in data["methods"]]
    width = max(map(len, names), default=8)
    q_width = max((len(w["quality"]) for w in data["workloads"]), default=8)
    print("Workloads:")
    for w in data["workloads"]:
        print(_fit(f"  {w['name']:<{width}} {w['family']:<10} {w['quality']:<{q_width}} "
                   f"{w['description']}"))
    reasons: list[str] = []  # footnotes: each reason a method cannot run here, once

    def here(m: dict[str, Any]) -> str:
        cells = []
        for device, ok in m["runnable"].items():
            if ok:
                cells.append(f"{device} yes")
                continue
            if m["reason"][device] not in reasons:
                reasons.append(m["reason"][device])
            cells.append(f"{device} no [{reasons.index(m['reason'][device]) + 1}]")
        return ", ".join(cells)

    shown = sorted(data["methods"], key=lambda m: (group_of[m["name"]], m["name"]))
    lines = {m["name"]: here(m) for m in shown}  # footnotes numbered as shown
    h_width = max(map(len, lines.values()), default=8)
    heading = None
    for m in shown:
        if m["group"] != heading:
            heading = m["group"]
            print(f"\n{heading}: device runnable here?")
        print(_fit(f"  {m['name']:<{width}} {lines[m['name']]:<{h_width}} {m['description']}"))
    if reasons:
        print("\nWhy not here:")
        for i, reason in enumerate(reasons, 1):
            print("\n".join(textwrap.wrap(f"[{i}] {reason}", LIST_WIDTH,
                                           subsequent_indent="    ")))
    return EXIT_OK


def env_command(args: argparse.Namespace) -> int:
    """``parabench env [--json]``: what this machine has (OS, CPU, torch, engines, ...)."""
    from parabench.envinfo import environment, format_environment

    info = environment()
    print(json.dumps(info, indent=2) if args.json else format_environment(info))
    return EXIT_OK
