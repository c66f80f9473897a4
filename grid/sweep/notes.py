"""What the user should know about a planned sweep before it runs (pure): settings that cannot take effect, levels
that cannot be reached, versions the flag catalog does not know, timeouts shorter than the time to first token the
twin models for a load. Each note is one sentence; none stops the run.

The timeout notes of a running trial (a timeout that fired while the server was healthy, or one close to the longest
wait for a token already observed) are built here too (``timeout_fired_text``, ``timeout_run_note``), so that the
pre-run and in-run wording agree."""

from __future__ import annotations

import math
import re

from grid.config.schema import DEFAULT_TAIL_PERCENTILE, RunSpec, requests_for_tail
from grid.engines.base import engine_class
from grid.releases.flags import catalog_note
from grid.plan import TrialPlan, level_name, load_points
from grid.versions import ServerIdentity


def plan_notes(spec: RunSpec, plans: list[TrialPlan], version: str) -> list[str]:
    """Every note that applies to ``plans`` (the sweep's configurations) planned for the servers of ``version`` (the
    engine's ``engine_version`` label: an SGLang release, or another engine's, grid.versions.ServerIdentity)."""
    release = ServerIdentity.parse(version).sglang_version
    notes = [catalog_note(release) if release else None, external_note(spec, plans), thin_level_note(plans), thin_tail_note(spec, plans),
             inert_settings_note(spec, plans), unmodelled_note(spec, plans),
             modelled_ttft_note(spec, plans, version)]
    return [n for n in notes if n]


def thin_level_note(plans: list[TrialPlan]) -> str | None:
    """A note when a concurrency level gets fewer requests than it has streams (it is never reached), else None."""
    thin = sorted({(c, p.load.prompts_for(c)) for p in plans for c in p.load.concurrency if p.load.prompts_for(c) < c})
    if not thin:
        return None
    levels = ", ".join(f"concurrency {c} with {n} request{'s' if n != 1 else ''}" for c, n in thin)
    return (f"{levels}: fewer requests than streams, so that level is never reached (raise load.num_prompts, "
            "load.prompts_per_stream or load.min_prompts)")


def thin_tail_note(spec: RunSpec, plans: list[TrialPlan]) -> str | None:
    """A note when a load point gets fewer requests than its tail needs: ``requests_for_tail`` of the SLOs' percentile
    (p99 without SLOs; grid.config.schema), below which that percentile is the slowest request. None otherwise."""
    percentile = spec.objective.slo.percentile
    need = requests_for_tail(percentile)
    thin = sorted({(pt.kind, pt.value, pt.num_prompts) for p in plans for pt in load_points(p)
                   if pt.kind != "trace" and pt.num_prompts < need})  # a trace's requests are the trace's
    if not thin:
        return None
    shown = [f"{level_name({'point_kind': kind, 'point_value': v})} with {n}" for kind, v, n in thin]
    text = ", ".join(shown[:4]) + (f" and {len(shown) - 4} more" if len(shown) > 4 else "")
    return (f"{text} request{'s' if thin[-1][2] != 1 else ''}: fewer than the {need} that p{percentile:g} needs not "
            "to be the slowest request, so one slow request sets those tails and the SLOs judged on them (set "
            f"load.min_prompts={need}; null gives {requests_for_tail(DEFAULT_TAIL_PERCENTILE)}, enough for "
            f"p{DEFAULT_TAIL_PERCENTILE:g})")


def inert_settings_note(spec: RunSpec, plans: list[TrialPlan]) -> str | None:
    """A note when the configurations set DSA/NSA backends for a model without DeepSeek Sparse Attention: SGLang
    accepts the flags and ignores them, so configurations differing only there measure the same server."""
    if spec.model.dsa is not None:
        return None
    keys = sorted({k for p in plans for k in p.settings if k.startswith("dsa_")})
    if not keys:
        return None
    return (f"{', '.join(keys)} only matter for models with DeepSeek Sparse Attention; {spec.model.name} has none, "
            "so SGLang ignores them")


def external_note(spec: RunSpec, plans: list[TrialPlan]) -> str | None:
    """A note when configurations differing in server settings are to be measured on an external server, which
    grid cannot reconfigure (None otherwise)."""
    if not engine_class(spec.engine.kind).external:
        return None
    keys = sorted({k for p in plans for k in p.settings if len({repr(q.settings.get(k)) for q in plans}) > 1})
    if not keys:
        return None
    return (f"engine=openai measures the server at {spec.engine.base_url} as it runs: the swept server settings "
            f"({', '.join(keys)}) cannot be applied to it, so every configuration measures the same server. Sweep "
            "load settings instead, or launch the servers with engine=sglang")


def unmodelled_note(spec: RunSpec, plans: list[TrialPlan]) -> str | None:
    """A note when a sweep on the twin (engine=sim) varies a setting whose SGLang option the twin accepts but does
    not model (the setting's entry says so: grid/releases/flags.py ``Setting.twin`` is None): those configurations
    measure the same modelled server."""
    if not engine_class(spec.engine.kind).twin:
        return None
    from grid.releases.flags import SETTINGS

    varied = sorted({k for p in plans for k in p.settings if k in SETTINGS
                     and len({repr(q.settings.get(k)) for q in plans}) > 1})
    inert = [name for name in varied if SETTINGS[name].twin is None]
    if not inert:
        return None
    return (f"the twin accepts {', '.join(inert)} but does not model {'it' if len(inert) == 1 else 'them'} "
            "(accepted, no effect in the twin): configurations differing only there measure the same modelled "
            "server")


# -- timeouts against the time to first token -------------------------------------------------------------------------
#: A timeout within this fraction of the longest wait for a token already observed gets a note during the run.
TIMEOUT_MARGIN = 0.8


def _timeouts(load) -> list[tuple[str, float]]:
    """The per-request timeouts that fail a request still waiting for its first token, (setting, modelled s)."""
    out = [("read_timeout_s", float(load.read_timeout_s))]
    if load.stall_timeout_s is not None:
        out.insert(0, ("stall_timeout_s", float(load.stall_timeout_s)))
    return out


def first_wave_ttft_s(spec: RunSpec, plan: TrialPlan, version: str, requests: int) -> float | None:
    """The longest TTFT (modelled s) of ``requests`` requests of ``plan.load.input_len`` tokens that reach the twin
    at once (the first wave of a closed loop at that concurrency), from the twin's performance model and scheduler in
    virtual time (grid/twin/simulate.py); None when the twin would refuse the configuration."""
    from grid.releases.flags import parse_version, to_argv
    from grid.twin.perf_of_flags import perf_model
    from grid.twin.scheduler import TwinRequest
    from grid.twin.simulate import simulate

    perf = perf_model(spec.model, spec.hardware, to_argv(plan.settings, parse_version(version)), version,
                      spec.engine.env)
    if perf is None:
        return None
    wave = [(0.0, TwinRequest(rid=str(i), input_tokens=plan.load.input_len, max_new_tokens=1))
            for i in range(requests)]
    return max(r.ttft_s for r in simulate(perf, wave).requests)


def modelled_ttft_note(spec: RunSpec, plans: list[TrialPlan], version: str) -> str | None:
    """With engine=sim, a note when ``load.stall_timeout_s`` or ``load.read_timeout_s`` is shorter than the TTFT the
    twin models for the first wave of a load level (the highest concurrency of each configuration, or every request
    of an ``inf`` request rate): every request of that wave would fail with that timeout and the trial would read as a
    hung server. None otherwise (other engines: the twin's model does not describe their server)."""
    if not engine_class(spec.engine.kind).twin:
        return None
    worst: tuple[float, str, TrialPlan, str, float] | None = None  # (ttft_s, level, plan, setting, timeout_s)
    for plan in plans:
        load = plan.load
        waves = [(max(load.concurrency), f"concurrency {max(load.concurrency)}")] if load.concurrency else []
        waves += [(load.prompts_for(r), "inf req/s") for r in load.request_rate if r == float("inf")]
        for requests, level in waves:
            ttft = first_wave_ttft_s(spec, plan, version, requests)
            if ttft is None:
                continue
            for setting, timeout in _timeouts(load):
                if timeout < ttft and (worst is None or ttft - timeout > worst[0] - worst[4]):
                    worst = (ttft, level, plan, setting, timeout)
    if worst is None:
        return None
    ttft, level, plan, setting, timeout = worst
    return (f"load.{setting}={timeout:g} is shorter than the time to first token the twin models for {level} "
            f"({plan.label}: {ttft:.1f} s for the last of the first wave of {plan.load.input_len}-token prompts): "
            f"those requests will fail with {setting.removesuffix('_s')} and the trial would read as a hung server; "
            f"raise load.{setting} to at least {math.ceil(ttft)}")


def timeout_fired_text(counts: dict[str, int], total: int, stall_timeout_s: float | None,
                       read_timeout_s: float) -> str | None:
    """Which timeouts fired in a load point, e.g. ``stall_timeout_s=5 fired for 8 of 8 requests: no token for 5 s``
    (``counts``: failed requests per error class; timeouts in modelled s). None when none fired."""
    parts = []
    if counts.get("stall_timeout"):
        parts.append(f"stall_timeout_s={stall_timeout_s:g} fired for {counts['stall_timeout']} of {total} requests: "
                     f"no token for {stall_timeout_s:g} s")
    if counts.get("read_timeout"):
        parts.append(f"read_timeout_s={read_timeout_s:g} fired for {counts['read_timeout']} of {total} requests: "
                     f"no bytes for {read_timeout_s:g} s")
    return "; ".join(parts) or None


def timeout_run_note(level: str, fired: str | None, check_ttft_ms: float | None, longest_wait_ms: float | None,
                     stall_timeout_s: float | None, read_timeout_s: float) -> str | None:
    """A note for a load point at ``level`` (e.g. ``concurrency 8``) of a running trial, or None:

    * a timeout fired (``fired``, from :func:`timeout_fired_text`) while the server was healthy (a check request got
      its first token after ``check_ttft_ms``): the requests under this load wait longer for a token than the
      timeout allows;
    * no timeout fired, but the longest wait for a token observed so far (``longest_wait_ms``: TTFT or gap between
      tokens, modelled ms) reached ``TIMEOUT_MARGIN`` of a timeout: the next, higher level will likely hit it.
    """
    if fired is not None and check_ttft_ms is not None:
        return (f"at {level} {fired}, while the server was healthy (a check request right after got its first token "
                f"in {check_ttft_ms / 1000:.2g} s): requests under this load wait longer than the timeout for a "
                "token; raise the timeout")
    if fired is None and longest_wait_ms is not None:
        for setting, timeout in (("stall_timeout_s", stall_timeout_s), ("read_timeout_s", read_timeout_s)):
            if timeout is not None and longest_wait_ms >= TIMEOUT_MARGIN * timeout * 1000:
                return (f"at {level} a request waited {longest_wait_ms / 1000:.3g} s for a token, "
                        f"{longest_wait_ms / 10 / timeout:.0f}% of load.{setting}={timeout:g}: higher levels will "
                        "likely fail with that timeout; raise it")
    return None


# -- what is known before launch (grid/search/knowledge.py) ----------------------------------------------------------
#: The head of a release's refusal (grid/releases/checks.py ``refuse``), left out of the grouped note, which names
#: the reason once for many configurations.
_REFUSAL_HEAD = re.compile(r"^(?:SGLang \S+ would refuse|\S+ \((?:SM\d+|CPU)\) cannot run) this configuration: ")


def known_notes(plans: list[TrialPlan], known: dict) -> list[str]:
    """One note per failure-table row that applies to some configurations: ``known to fail here (<source>)`` with
    their labels, and one for the configurations refused before launch (``known``: config_hash -> Known)."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    refused: dict[str, list[str]] = {}
    for plan in plans:
        k = known.get(plan.config_hash)
        if k is None:
            continue
        if k.refused:
            refused.setdefault(_REFUSAL_HEAD.sub("", k.refused), []).append(plan.label)
        elif k.known_to_fail:
            groups.setdefault(k.failures[0], []).append(plan.label)
    notes = []
    for why, labels in refused.items():
        notes.append(f"refused before launch ({len(labels)} configuration{'s' if len(labels) != 1 else ''}, no "
                     f"launch): {why}: {', '.join(labels)}")
    for (row, effect, source), labels in groups.items():
        notes.append(f"known to fail here ({row}, {effect}: {source}): {len(labels)} configuration"
                     f"{'s' if len(labels) != 1 else ''}, queued last (not launched once another configuration measured a "
                     f"score, but by search.kind=exhaustive): {', '.join(labels)}")
    return notes
