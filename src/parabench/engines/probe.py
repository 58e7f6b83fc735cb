"""Fail fast on an external engine that is not there: one short TCP connect before starting.

Usage::

    from parabench.config import ConfigError
    from parabench.engines.probe import check_external_engines, require_listening

    try:                                     # nothing listens on port 1: a ConfigError at once
        require_listening("tcp://127.0.0.1:1", option="--dask-scheduler", default_port=8786)
    except ConfigError as error:
        print(error)                         # "... nothing answers at 127.0.0.1:1 ..."
    check_external_engines(grid.options)     # the CLI: every address given, before any case

Dask's client and Spark's driver retry an unreachable address for minutes (what was seen:
docs/measurements.md) before failing with an error that does not name it. A refused or
unanswered connect
here is a :class:`~parabench.config.ConfigError` (exit 2) within a few seconds, saying
"nothing answers at HOST:PORT". An address with several hosts (Spark's standby masters) passes
when any of them answers. Only reachability is checked; what answers is the engine's business.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from parabench.config import ConfigError

CONNECT_TIMEOUT_S = 3.0


def endpoints(address: str, default_port: int) -> list[tuple[str, int]]:
    """(host, port) pairs of ``scheme://host[:port][,host[:port]..][/path]`` or ``host:port``."""
    rest = address.split("://", 1)[1] if "://" in address else address
    rest = rest.split("/", 1)[0]
    found = []
    for part in filter(None, rest.split(",")):
        parsed = urlsplit(f"//{part}")
        try:
            port = parsed.port or default_port
        except ValueError as exc:
            raise ConfigError(f"{address!r}: bad port in {part!r} ({exc})") from None
        if not parsed.hostname:
            raise ConfigError(f"{address!r}: no host in {part!r}; expected HOST:PORT")
        found.append((parsed.hostname, port))
    if not found:
        raise ConfigError(f"{address!r}: no host; expected scheme://HOST:PORT")
    return found


def require_listening(address: str, *, option: str, default_port: int,
                      timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Return when something accepts a TCP connection at ``address``; else ConfigError."""
    failures = []
    for host, port in endpoints(address, default_port):
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError as exc:
            why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
            failures.append(f"{host}:{port} ({why})")
    raise ConfigError(
        f"{option} {address}: nothing answers at {', '.join(failures)}; start it first, "
        f"or leave {option} out to run a local one"
    )


#: option name -> (its flag, the engine's default port, "is this value an address to probe?")
EXTERNAL: dict[str, tuple[str, int, Callable[[str], bool]]] = {
    "dask_scheduler": ("--dask-scheduler", 8786, lambda v: not v.startswith("inproc://")),
    "spark_master": ("--spark-master", 7077, lambda v: v.startswith("spark://")),
}


def check_external_engines(options: Mapping[str, Sequence[Any]]) -> None:
    """Probe every external engine address of a grid's options, before any case starts."""
    for name, (flag, port, is_address) in EXTERNAL.items():
        for value in options.get(name, ()):
            if isinstance(value, str) and is_address(value):
                require_listening(value, option=flag, default_port=port)
