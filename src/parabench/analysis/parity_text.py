"""A parity verdict in words, as the table and the recommendation show it.

Usage::

    parity_text(result.parity)                  # 'ok w 2e-7', 'FAILED epoch 2 loss', ...
    parity_cell(r.parity for r in repeats)      # the worst checked verdict, 'base' or '-'
    severity(result.parity)                     # (failed, figure / tolerance): for max()
"""

from __future__ import annotations

from collections.abc import Iterable

from parabench.core.records import Parity

__all__ = ["blind_text", "parity_cell", "parity_text", "severity"]


def _sci(x: float) -> str:
    """Compact scientific notation: 2e-7, 3e-2, 0, inf."""
    if x == 0 or x != x or x in (float("inf"), float("-inf")):
        return f"{x:g}"
    mantissa, _, exp = f"{x:.0e}".partition("e")
    return f"{mantissa}e{int(exp)}"


def _trajectory_share(p: Parity) -> tuple[float, float]:
    """(loss, weight) difference, each over its tolerance (inf when not compared)."""
    tol = p.tolerance if isinstance(p.tolerance, dict) else {}
    loss = p.loss_rel_max if p.loss_rel_max is not None else float("inf")
    weight = p.weight_rel_l2 if p.weight_rel_l2 is not None else float("inf")
    return loss / (tol.get("loss_rel") or 1.0), weight / (tol.get("weight_rel_l2") or 1.0)


def severity(p: Parity) -> tuple[bool, float]:
    """How bad a parity verdict is: failed first, then its figure over its tolerance."""
    basis, tol = p.basis or "quality", p.tolerance
    if basis == "trajectory":
        figure = max(_trajectory_share(p))
    elif basis == "predictions":
        figure = 0.0 if p.identical else float("inf")
    elif basis == "target":
        figure = 0.0 if p.status == "ok" else float("inf")
    else:
        figure = -float(p.gap or 0.0) / (tol if isinstance(tol, float) and tol else 1.0)
    return p.status == "failed", figure


def parity_text(p: Parity) -> str:
    """One verdict with its evidence: ``ok w 2e-7``, ``FAILED loss 3e-2 w 6e-3``, what else
    differed (``FAILED digest coverage``, ``FAILED final w 3e-2``, ``FAILED epoch 2 loss``,
    ``FAILED evaluation +0.016``), ``ok identical``, ``FAILED differs``, ``ok``,
    ``FAILED -0.210`` (the quality gap), ``FAILED not reached``, ``FAILED converged -0.046``
    (time to target); a statistical ``ok`` states its power: ``ok, blind <0.54`` (a loss
    under 0.54 would pass more than 5 % of the time; ``ok, blind <0.31 (1 seed)`` where
    it rests on one measured serial seed), or says why it cannot: ``ok, power unknown:
    1 serial seed, no calibration`` (``none recorded``: a result written before powers
    were)."""
    ok = p.status == "ok"
    basis = p.basis or "quality"
    gap = p.gap or 0.0
    if basis == "trajectory":
        if not ok and p.differs == "final weights" and p.final_weight_rel_l2 is not None:
            return f"FAILED final w {_sci(p.final_weight_rel_l2)}"
        if not ok and p.differs and p.differs != "first steps":  # says what differed
            return f"FAILED {p.differs}"
        if p.loss_rel_max is None or p.weight_rel_l2 is None:  # e.g. other traced steps
            return "ok" if ok else "FAILED steps differ"
        loss, weight = p.loss_rel_max, p.weight_rel_l2
        if not ok and p.trajectory_ok:  # trained like serial, evaluated otherwise
            return f"FAILED quality {gap:+.3f}"
        if not ok:
            return f"FAILED loss {_sci(loss)} w {_sci(weight)}"
        loss_share, weight_share = _trajectory_share(p)
        loss_worse = loss_share > weight_share
        return f"ok loss {_sci(loss)}" if loss_worse else f"ok w {_sci(weight)}"
    if basis == "predictions":
        if ok:
            return "ok identical"
        return "FAILED differs" if not p.identical else f"FAILED {gap:+.3f}"
    if basis == "target" and not ok:
        return f"FAILED {p.differs or 'not reached'}"
    if ok and p.detectable_loss is not None:  # its power: what it could not have seen
        note = f" ({p.power_note})" if p.power_note else ""
        return f"ok, blind <{blind_text(p.detectable_loss)}{note}"
    if ok and p.kind == "statistical":  # judged, yet no power: never a bare ok
        return f"ok, power unknown: {p.power_note or 'none recorded'}"
    return "ok" if ok else f"FAILED {gap:+.3f}"


def blind_text(loss: float) -> str:
    """A stated detectable loss: two decimals, three significant digits under 0.1 (0.013)."""
    return f"{loss:.2f}" if loss >= 0.1 else f"{loss:.2g}"


def parity_cell(parities: Iterable[Parity | None]) -> str:
    """The worst checked verdict of a configuration's repeats; ``base`` for the baseline,
    ``-`` when none was checked. Any failure reads ``FAILED ...``."""
    parities = [p for p in parities if p]
    checked = [p for p in parities if p.status in ("ok", "failed")]
    if not checked:
        return "base" if any(p.kind == "baseline" for p in parities) else "-"
    return parity_text(max(checked, key=severity))
