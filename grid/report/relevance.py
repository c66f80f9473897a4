"""Whether a varied setting could have mattered at the load that was measured (pure).

A sweep that varies ``mem_fraction_static`` at a load that never fills a tenth of the KV pool, or
``cuda_graph_max_bs`` at batches all below the smallest captured size, ties every configuration and tests nothing.
Each check here is registered by the setting it covers and reads the server's own gauges stored per load point
(``srv_token_usage_max``: sglang:token_usage, ``srv_running_max``: sglang:num_running_reqs, ``srv_queue_max``:
sglang:num_queue_reqs; grid/sweep/samplers.py). A check returns the note the report shows, or None when the setting
may have mattered or the gauges were not scraped (nothing to say then).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Callable

from grid.plan import level_name
from grid.report.explain import varied_settings
from grid.report.select import Verdict

#: Below this peak KV pool fraction the pool's size cannot have limited anything: SGLang admits requests until the
#: pool is full (its scheduler checks the free KV tokens of the pool, python/sglang/srt/managers/schedule_policy.py
#: PrefillAdder), so a pool never more than half full leaves every admission decision the same at any size that
#: still holds the peak. 0.5 leaves room for the largest pool ratio a shipped sweep varies (0.80 vs 0.95: 1.19x).
KV_USAGE_IRRELEVANT = 0.5

Check = Callable[[Sequence[Mapping[str, Any]], list[Any]], str | None]
CHECKS: dict[str, Check] = {}


def register(setting: str) -> Callable[[Check], Check]:
    def add(fn: Check) -> Check:
        CHECKS[setting] = fn
        return fn
    return add


def _peak(rows: Sequence[Mapping[str, Any]], column: str) -> float | None:
    values = [r[column] for r in rows if r.get(column) is not None]
    return max(values) if values else None


@register("mem_fraction_static")
def _kv_pool(rows: Sequence[Mapping[str, Any]], values: list[Any]) -> str | None:
    peak = _peak(rows, "srv_token_usage_max")
    if peak is None or peak >= KV_USAGE_IRRELEVANT or (_peak(rows, "srv_queue_max") or 0) > 0:
        return None
    return (f"mem_fraction_static could not have mattered at the measured load: the KV pool was at most "
            f"{peak * 100:.0f}% full (sglang:token_usage) and no request queued, so any pool size tested held every "
            "request; load longer contexts or more streams (conf/sweep/mem_fraction.yaml) to compare them")


def _batch_cap(setting: str, what: str) -> Check:
    def check(rows: Sequence[Mapping[str, Any]], values: list[Any]) -> str | None:
        caps = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        peak = _peak(rows, "srv_running_max")
        if not caps or peak is None or peak > min(caps):
            return None
        return (f"{setting} could not have mattered at the measured load: at most {peak:g} requests ran at once "
                f"(sglang:num_running_reqs), within the smallest {what} tested ({min(caps):g}); load more streams "
                "to compare them")
    return check


register("cuda_graph_max_bs")(_batch_cap("cuda_graph_max_bs", "captured batch size"))
register("torch_compile_max_bs")(_batch_cap("torch_compile_max_bs", "compiled batch size"))
register("max_running_requests")(_batch_cap("max_running_requests", "cap"))


#: A scheduling policy orders the requests waiting in the queue; with at most this many waiting at once there is one
#: order only (python/sglang/srt/managers/schedule_policy.py SchedulePolicy.calc_priority sorts waiting_queue).
QUEUE_IRRELEVANT = 1


@register("schedule_policy")
def _queue_order(rows: Sequence[Mapping[str, Any]], values: list[Any]) -> str | None:
    peak = _peak(rows, "srv_queue_max")
    if peak is None or peak > QUEUE_IRRELEVANT:
        return None
    return (f"schedule_policy could not have mattered at the measured load: at most {peak:g} request"
            f"{'' if peak == 1 else 's'} waited in the server's queue at once (sglang:num_queue_reqs), and the "
            "policy only orders waiting requests, of which one or none has a single order; load more (a higher "
            "rate or more streams than max_running_requests) to compare them")


def notes(verdicts: Iterable[Verdict], swept: Mapping[str, Sequence[Any]] | None = None) -> list[str]:
    """One note per varied setting that could not have mattered at the load measured (over the ok load points of
    every configuration that ran), in setting order. A setting is varied when the recorded configurations differ
    in it, or when ``swept`` (setting -> the values the sweep's configurations give it, :func:`swept_values`) lists
    more than one value: a search that measured one configuration of several still says its load could not tell
    them apart."""
    verdicts = list(verdicts)
    rows = [r for v in verdicts for r in v.rows if r["status"] == "ok" and r["trial_status"] == "ok"]
    if not rows:
        return []
    varied = {k: sorted({v for v in by_hash.values() if v is not None}, key=str)
              for k, by_hash in varied_settings(verdicts).items()}
    for k, values in (swept or {}).items():
        if k not in varied and len({json.dumps(v, sort_keys=True) for v in values}) > 1:
            varied[k] = sorted({v for v in values if v is not None}, key=str)
    skipped = _early_stopped_levels(verdicts)
    out = []
    for setting, values in sorted(varied.items()):
        check = CHECKS.get(setting)
        if check is None:
            continue
        note = check(rows, values)
        if note and skipped:
            note += (f"; the sweep's {', '.join(skipped)} level{'' if len(skipped) == 1 else 's'} "
                     f"{'was' if len(skipped) == 1 else 'were'} not run (early stopping, search.early_stop=false "
                     "measures every level)")
        if note:
            out.append(note)
    return out


def _early_stopped_levels(verdicts: Sequence[Verdict]) -> list[str]:
    """The load levels (``1.5 req/s``) no configuration measured because early stopping skipped them (rows
    ``not_run`` with an ``early_stop_*`` error class, grid/search/levels.py), in level order: the load a note asks
    for may be in the sweep already."""
    measured = {(r["point_kind"], r["point_value"]) for v in verdicts for r in v.rows
                if r["status"] == "ok"}
    skipped = {(r["point_kind"], r["point_value"]): r for v in verdicts for r in v.rows
               if r["status"] == "not_run" and str(r["error_class"] or "").startswith("early_stop")
               and r["point_value"] is not None}
    return [level_name(skipped[k]) for k in sorted(set(skipped) - measured, key=lambda k: (str(k[0]), k[1]))]


def swept_values(settings: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Setting -> the values the configurations ``settings`` give it (None where one does not set it), for
    :func:`notes`."""
    settings = list(settings)
    keys = sorted({k for s in settings for k in s})
    return {k: [s.get(k) for s in settings] for k in keys}
