"""The command line's value types: argparse ``type=`` callables that raise
``argparse.ArgumentTypeError`` with a message saying what was expected.

Usage::

    p.add_argument("--workers", type=csv(positive_int, "worker counts"))
    p.add_argument("--steps", type=count(0))
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence

from parabench.config import AUTO, BatchSize
from parabench.stopping import ToTarget

BOOLS = {"on": True, "true": True, "yes": True, "1": True,
          "off": False, "false": False, "no": False, "0": False}


def csv(convert: Callable[[str], object], what: str) -> Callable[[str], list]:
    def parse(text: str) -> list:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what}")
        try:
            return [convert(t) for t in items]
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise argparse.ArgumentTypeError(f"invalid {what} in {text!r}: {exc}") from None

    return parse


def count(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is not >= {minimum}")
        return value

    return parse


positive_int = count(1)


def batch(text: str) -> BatchSize:
    return AUTO if text == AUTO else positive_int(text)


def target(text: str) -> ToTarget:
    """``--target-quality``'s value: a number, or 'default' (each workload's own target)."""
    if text == "default":
        return ToTarget()
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number or 'default'")
    return ToTarget(value)


def choice(valid: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in valid:
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(valid)}")
        return text

    return parse


def bool_value(text: str) -> bool:
    if text.lower() not in BOOLS:
        raise argparse.ArgumentTypeError(f"{text!r} is not on/off")
    return BOOLS[text.lower()]


def non_negative_int(text: str) -> int:
    return 0 if text.strip() == "0" else positive_int(text)
