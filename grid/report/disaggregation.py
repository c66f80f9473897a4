"""Aggregated against disaggregated: the best deployment of each kind and what splitting prefill from decode gains or
loses (pure). Users keep finding that prefill-decode disaggregation gave them nothing (sgl-project/sglang#24488,
#6459): the aggregated baseline is always part of the answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def pd_verdict(plans: Sequence[Any], scores: Mapping[str, float | None], higher_is_better: bool, unit: str,
               source: str = "the twin's forecast") -> str | None:
    """One line naming the best aggregated deployment (one server, or replicas) and the best disaggregated one of
    ``plans`` (``grid.plan.TrialPlan``) by ``scores`` (config hash -> score in ``unit``; None: no point met the
    SLOs) and the gain or loss of the disaggregated one; None when ``plans`` hold no disaggregated deployment."""
    def kind(p) -> str:
        return "disaggregated" if p.deployment is not None and p.deployment.disaggregated else "aggregated"

    if not any(kind(p) == "disaggregated" for p in plans):
        return None
    best: dict[str, tuple[str, float] | None] = {"aggregated": None, "disaggregated": None}
    for p in plans:
        value = scores.get(p.config_hash)
        if value is None:
            continue
        held = best[kind(p)]
        if held is None or (value > held[1] if higher_is_better else value < held[1]):
            best[kind(p)] = (p.label, value)
    agg, pd = best["aggregated"], best["disaggregated"]
    count = {k: sum(1 for p in plans if kind(p) == k) for k in best}

    def unscored(k: str) -> str:
        if count[k] == 0:
            return "none was tried"
        if count[k] == 1:
            return f"none meets the SLOs ({next(p.label for p in plans if kind(p) == k)})"
        return f"none of the {count[k]} meets the SLOs"
    text = {k: f"{v[0]} ({v[1]:.4g} {unit})" if v else unscored(k) for k, v in best.items()}
    line = f"Aggregated vs disaggregated ({source}): best aggregated: {text['aggregated']}; best disaggregated: " \
           f"{text['disaggregated']}"
    if agg and pd:
        change = pd[1] / agg[1] - 1
        better = change > 0 if higher_is_better else change < 0
        return f"{line}: disaggregation {'gains' if better else 'loses'} {abs(change):.1%}"
    if pd:
        return f"{line}: only disaggregation meets the SLOs"
    if agg:
        return f"{line}: disaggregation meets no SLO here; stay aggregated"
    return line
