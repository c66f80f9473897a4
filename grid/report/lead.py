"""What a report leads with: the best configuration's lead over the runner-up and over the sweep's base, and how
confident each lead is (pure).

The sweep's base is the configuration that leaves every swept setting where SGLang puts it when the flag is not
given (grid.releases.flags.release_default): the server a user gets without tuning those settings. A sweep whose
every configuration sets a swept flag that SGLang otherwise picks itself at start-up has no base; the report says so.
A lead is *confident* when the 95% confidence intervals of the two scores do not overlap (grid.report.select.is_tie:
two repeats or more of the level) and it is larger than the share of the points' time the host took, a tie when
either fails; with one repeat the spread is not measured and the report says how to measure it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grid.plan import level_name
from grid.releases.flags import SETTINGS, parse_version, release_default
from grid.report.select import Objective, Verdict, fmt_scores, is_tie
from grid.versions import ServerIdentity

BASE_WORDS = "SGLang's defaults for the swept settings"


@dataclass(frozen=True)
class SweepBase:
    """The sweep's base: its ``config_hash`` and ``label``, or None and ``why_none`` (no configuration of the sweep
    leaves the swept settings at SGLang's defaults, or the engine is not SGLang)."""

    config_hash: str | None
    label: str | None
    why_none: str | None = None


def swept_keys(settings: Sequence[Mapping[str, Any]]) -> list[str]:
    """The settings whose value differs between configurations, sorted."""
    keys = sorted({k for s in settings for k in s})
    return [k for k in keys if len({repr(s.get(k)) for s in settings}) > 1]


def sweep_base(plans: Sequence[Any], server: ServerIdentity) -> SweepBase:
    """The sweep's base among ``plans`` (objects with ``config_hash``, ``label``, ``settings``) for the ``server``
    measured (an SGLang release has defaults; any other engine has no base). A configuration is at the defaults
    when each swept setting is unset (None) or equals :func:`grid.releases.flags.release_default`."""
    version = server.sglang_version
    if version is None:
        return SweepBase(None, None, f"the server measured ({server.describe()}) is not an SGLang release: its "
                                     "defaults are not known")
    ver = parse_version(version)
    keys = [k for k in swept_keys([p.settings for p in plans]) if k in SETTINGS]
    if not keys:
        return SweepBase(None, None, "the sweep varies no SGLang setting")
    defaults = {k: release_default(k, ver) for k in keys}
    for p in plans:
        if all(p.settings.get(k) is None or p.settings.get(k) == defaults[k] for k in keys):
            return SweepBase(p.config_hash, p.label)
    picked = [k for k in keys if defaults[k] is None]
    if picked:
        return SweepBase(None, None, f"every configuration sets {', '.join(picked)}, which SGLang {version} picks "
                                     "itself at start-up when unset (add null to that axis of the sweep to measure "
                                     "SGLang's own choice)")
    wanted = ", ".join(f"{k}={defaults[k]!r}" for k in keys)
    return SweepBase(None, None, f"no configuration runs SGLang {version}'s defaults ({wanted})")


def _gain_percent(best: float, other: float, higher_is_better: bool) -> float:
    """How much better ``best`` is than ``other``, in percent of ``other`` (positive: better)."""
    if other == 0:
        return 0.0
    return (best - other) / abs(other) * 100 if higher_is_better else (other - best) / abs(other) * 100


def _versus(best: Verdict, other: Verdict, obj: Objective) -> str:
    """``+3.2% (297.9 vs 288.6 tok/s at concurrency 64): confident, outside the measured spread (...)``."""
    assert best.score is not None and other.score is not None
    gain = _gain_percent(best.score, other.score, obj.higher_is_better)
    mine, theirs = fmt_scores(best.score, other.score)
    where = f" at {level_name(other.best_point)}" if other.best_point and obj.metric != "point_value" else ""
    delta = (other.score - best.score) / best.score * 100 if best.score else 0.0
    tied, why = is_tie(other.interval, best.interval, delta, obj.unit, max(other.host_pct, best.host_pct))
    if tied:
        confidence = f"not a confident lead: {why}"
    elif why:
        confidence = f"confident: {why}"
    else:
        confidence = "spread not measured (load.repeats=1): set load.repeats=3 to know how confident"
    return f"{gain:+.1f}% ({mine} vs {theirs} {obj.unit}{where}); {confidence}"


def lead_lines(verdicts: Sequence[Verdict], obj: Objective, base: SweepBase | None) -> list[str]:
    """The lines under the best configuration: its lead over the runner-up, then over the sweep's ``base``
    (``None``: not known). [] when no configuration won."""
    best = next((v for v in verdicts if v.outcome == "best"), None)
    if best is None or best.score is None:
        return []
    scored = [v for v in verdicts if v.score is not None and v is not best]
    lines = [f"Lead over the runner-up `{scored[0].label}`: {_versus(best, scored[0], obj)}" if scored else
             "No runner-up: no other configuration qualified"]
    if base is None:
        return lines
    if base.config_hash is None:
        return [*lines, f"No sweep base to compare with: {base.why_none}"]
    if base.config_hash == best.config_hash:
        return [*lines, f"The best configuration is the sweep's base ({BASE_WORDS}): the swept settings gain "
                        "nothing over SGLang's defaults here"]
    mine = next((v for v in verdicts if v.config_hash == base.config_hash), None)
    if mine is None:
        return [*lines, f"The sweep's base `{base.label}` ({BASE_WORDS}) was not measured in this run"]
    if mine.score is None:
        return [*lines, f"The sweep's base `{base.label}` ({BASE_WORDS}) did not qualify ({mine.outcome}): "
                        f"{mine.reason}"]
    return [*lines, f"Lead over the sweep's base `{base.label}` ({BASE_WORDS}): {_versus(best, mine, obj)}"]
