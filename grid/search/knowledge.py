"""What grid knows about a configuration before launching it (pure): refused (the hardware or SGLang cannot run it)
or known to fail here (a row of the twin's failure table applies), and the launch order that follows.

* **refused**: ``Engine.refuse`` (grid/releases/checks.py ``RULES``: SGLang's argument checks and the kernels'
  hardware requirements). Never launched, never counted against a budget; recorded ``invalid`` / ``refused``.
* **known to fail**: a row of grid/twin/failures.py ``FAILURE_TABLE`` matches the configuration on this model,
  hardware and SGLang release (NaN output, a startup crash or hang, an out-of-memory). It is launched all the same
  (the table may be out of date), but last, and a search whose budget runs out skips it;
  ``search.try_known_failures=true`` runs such configurations first instead.

Only engines that launch servers of a dialect the twin knows (``Engine.forecastable``: ``sim``, the twin, and
``sglang``) are judged against the table; an external server (``openai``) is what it is, and another family's
launched server has its own dialect (grid/releases/dialect.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grid.config.schema import RunSpec
from grid.engines.base import engine_class
from grid.plan import TrialPlan

@dataclass(frozen=True)
class Known:
    """Pre-launch knowledge of one configuration: ``refused`` (the reason) or ``failures`` (failure-table row ids
    with their sources); both empty for a configuration grid expects to run."""

    refused: str | None = None
    failures: tuple[tuple[str, str, str], ...] = ()  # (row id, effect, source)

    @property
    def known_to_fail(self) -> bool:
        return self.refused is None and bool(self.failures)

    def text(self) -> str | None:
        """``known to fail here (<id>: <source>)`` for a known failure, None otherwise."""
        if not self.known_to_fail:
            return None
        return "known to fail here (" + "; ".join(f"{i}, {effect}: {src}" for i, effect, src in self.failures) + ")"


def twin_model(spec: RunSpec, settings: dict[str, Any], version: str):
    """The twin's ``PerfModel`` of ``settings`` on ``spec``'s model and hardware at SGLang ``version``; None when the
    twin's argument checks refuse them (SGLang would too)."""
    from grid.releases.flags import parse_version, to_argv
    from grid.twin.perf_of_flags import perf_model

    return perf_model(spec.model, spec.hardware, to_argv(settings, parse_version(version)), version, spec.engine.env)


def plan_model(spec: RunSpec, plan: TrialPlan, version: str):
    """The twin's uncalibrated model of ``plan``: one server's ``PerfModel`` (:func:`twin_model`), or for a deployment
    of several servers its ``DeploymentModel`` (grid/twin/deployment.py); None when the twin refuses the configuration
    or one of the deployment's servers."""
    if plan.deployment is None:
        return twin_model(spec, plan.settings, version)
    from grid.twin.deployment import deployment_model

    try:
        return deployment_model(plan.deployment, spec.model, spec.hardware, version, plan.settings, spec.engine.env)
    except ValueError:
        return None


def failures(spec: RunSpec, plan: TrialPlan, version: str) -> tuple[tuple[str, str, str], ...]:
    """The known failures (id, effect, source) of ``plan`` on ``spec``'s model and hardware: the launch rules of
    stage ``start`` (grid/releases/checks.py: SGLang starts and dies before it is ready), then the failure-table rows
    (grid/twin/failures.py) where the twin models the hardware (GPUs: the table holds no row of SGLang's CPU
    engine)."""
    if not engine_class(spec.engine.kind).forecastable():  # the failure table: SGLang's servers grid launches
        return ()
    from grid.releases.checks import start_failures
    from grid.twin.failures import find_failures

    rules = tuple((r.name, "startup_crash", r.where)
                  for r in start_failures(plan.settings, version, spec.model, spec.hardware))
    perf = None if spec.hardware.is_cpu else twin_model(spec, plan.settings, version)
    if perf is None:
        return rules
    return rules + tuple((f.id, f.effect, f.source) for f in find_failures(spec.model, spec.hardware, perf.cfg, perf))


def assess(spec: RunSpec, engine: Any, plans: list[TrialPlan], version: str) -> dict[str, Known]:
    """``config_hash`` -> :class:`Known` for every plan: refused as the engine refuses it (``Engine.refuse``; a
    deployment of several servers also when it does not fit the nodes, SGLang would refuse one of its servers or fail
    a prefill-decode pair's first transfer), else its known failures (:func:`failures`; a deployment's: each role's
    server's)."""
    import dataclasses

    out: dict[str, Known] = {}
    for plan in plans:
        why = engine.refuse(plan)
        if why:
            out[plan.config_hash] = Known(refused=why)
            continue
        shapes = [plan] if plan.deployment is None else [
            dataclasses.replace(plan, settings=plan.role_settings(g), deployment=None) for g in plan.deployment.groups]
        rows: list[tuple[str, str, str]] = []
        for one in shapes:
            rows += [row for row in failures(spec, one, version) if row not in rows]
        out[plan.config_hash] = Known(failures=tuple(rows))
    return out


def launch_order(plans: list[TrialPlan], known: dict[str, Known], try_known_failures: bool = False) -> list[TrialPlan]:
    """``plans`` in launch order (stable): refused ones first (they cost no launch), then the expected-to-run ones,
    and the known failures last; with ``try_known_failures`` the known failures come right after the refused."""
    def rank(p: TrialPlan) -> int:
        k = known.get(p.config_hash, Known())
        if k.refused:
            return 0
        if k.known_to_fail:
            return 1 if try_known_failures else 3
        return 2
    return sorted(plans, key=rank)
