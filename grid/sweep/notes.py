"""What the user should know about a planned sweep before it runs (pure): settings that cannot take effect, levels
that cannot be reached, versions the flag catalog does not know. Each note is one sentence; none stops the run."""

from __future__ import annotations

from grid.config.schema import RunSpec
from grid.engines.flags import catalog_note
from grid.sweep.space import TrialPlan


def plan_notes(spec: RunSpec, plans: list[TrialPlan], version: str) -> list[str]:
    """Every note that applies to ``plans`` (the sweep's configurations) planned for SGLang ``version``."""
    notes = [catalog_note(version), external_note(spec, plans), thin_level_note(plans),
             inert_settings_note(spec, plans), unmodelled_note(spec, plans, version)]
    return [n for n in notes if n]


def thin_level_note(plans: list[TrialPlan]) -> str | None:
    """A note when a concurrency level gets fewer requests than it has streams (it is never reached), else None."""
    thin = sorted({(c, p.load.prompts_for(c)) for p in plans for c in p.load.concurrency if p.load.prompts_for(c) < c})
    if not thin:
        return None
    levels = ", ".join(f"concurrency {c} with {n} request{'s' if n != 1 else ''}" for c, n in thin)
    return (f"{levels}: fewer requests than streams, so that level is never reached (raise load.num_prompts, "
            "load.prompts_per_stream or load.min_prompts)")


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
    if spec.engine.kind != "openai":
        return None
    keys = sorted({k for p in plans for k in p.settings if len({repr(q.settings.get(k)) for q in plans}) > 1})
    if not keys:
        return None
    return (f"engine=openai measures the server at {spec.engine.base_url} as it runs: the swept server settings "
            f"({', '.join(keys)}) cannot be applied to it, so every configuration measures the same server. Sweep "
            "load settings instead, or launch the servers with engine=sglang")


def unmodelled_note(spec: RunSpec, plans: list[TrialPlan], version: str) -> str | None:
    """A note when a sweep on the twin (engine=sim) varies a setting whose SGLang option the twin accepts but does
    not model (grid/twin/cli.py ``MODELLED``): those configurations measure the same modelled server."""
    if spec.engine.kind != "sim":
        return None
    from grid.engines.flags import SETTINGS, parse_version
    from grid.twin.cli import effect

    try:
        ver = parse_version(version)
    except ValueError:
        return None
    varied = sorted({k for p in plans for k in p.settings if k in SETTINGS
                     and len({repr(q.settings.get(k)) for q in plans}) > 1})
    inert = []
    for name in varied:
        opt = SETTINGS[name].option(ver)
        if opt is not None and effect(opt.dest) != "modelled":
            inert.append(name)
    if not inert:
        return None
    return (f"the twin accepts {', '.join(inert)} but does not model {'it' if len(inert) == 1 else 'them'} "
            "(accepted, no effect in the twin): configurations differing only there measure the same modelled "
            "server")
