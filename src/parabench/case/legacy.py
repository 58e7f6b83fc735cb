"""Older result records read as today's: schema 1 as schema 2, retired method names as the
current ones, so old results files join new ones in tables, ``--resume`` and ``compare``.

Usage::

    from parabench.case.legacy import upgraded
    upgraded({"schema": 1, "method": "threads", "extra": {"parity_kind": "exact"}})
    # schema 2, method 'rf_threads', grading {'kind': 'exact', 'reason': None}

:meth:`parabench.case.result.Result.from_dict` calls it on every record it reads.
"""

from __future__ import annotations

from typing import Any

from parabench.registry import current_method


def upgraded(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (a result record as read) in the current schema and names."""
    if data.get("schema") == 1:
        data = _from_schema1(data)
    return _current_names(data)


#: schema 1 kept these facts in ``extra`` (sessions' notes); schema 2 declares them in Facts
_SCHEMA1_FACTS = ("config_error", "predictions_sha", "samples_per_client", "self_max_rss_mb",
                  "rank_threads", "rank_cores", "rank_max_rss_mb", "rank_peak_pss_mb",
                  "rank_hosts")


def _from_schema1(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 result (written before 2026-11-25) as schema 2: the facts analysis reads
    move from ``extra`` to ``facts``, ``extra["parity_kind"]`` / ``["parity_reason"]`` (set
    at run time by data parallelism) become ``grading``, an empty ``machine`` None."""
    extra = dict(data.get("extra") or {})
    facts: dict[str, Any] = {k: extra.pop(k) for k in _SCHEMA1_FACTS if k in extra}
    kind, why = extra.pop("parity_kind", None), extra.pop("parity_reason", None)
    out = {**data, "extra": extra, "facts": facts, "schema": 2,
           "machine": data.get("machine") or None}
    if kind:
        out["grading"] = {"kind": kind, "reason": why}
    return out


def _current_names(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with a retired method name (its own and its requested config's) replaced by
    the current one, so old results join new ones in tables, ``--resume`` and ``compare``."""
    config = data.get("config")
    method = data.get("method")
    if isinstance(method, str) and current_method(method) != method:
        data = {**data, "method": current_method(method)}
    if isinstance(config, dict) and isinstance(config.get("method"), str) and (
            current_method(config["method"]) != config["method"]):
        data = {**data, "config": {**config, "method": current_method(config["method"])}}
    return data
