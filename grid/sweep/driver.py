"""The sweep driver: plan the trials, start (or join) the Ray cluster, put one ServerActor on every node, run one
Tune trial per server configuration, and always stop every server before leaving.

Resume: the Parquet tables in the run directory are the source of truth. A configuration whose load-points file
exists is not run again (failed ones only with ``retry_failed=true``; ``skipped`` ones, whose launch hit an
infrastructure fault such as env_dirty or port_in_use, always); ``fresh=true`` starts over. Damaged Parquet files are
set aside first (grid.storage.parquet.set_aside_corrupt) and their trials run again.

Why a fresh Tuner per invocation over the configurations not yet recorded, not ``Tuner.restore``
(ray_hydra.md §2.4): Tune's experiment state is a periodic snapshot, so after a driver SIGKILL a restore re-runs
trials that finished after the last snapshot (hours of GPU time for a GLM-5 sweep, and a second copy of their rows
unless something else deduplicates); it does not re-read the search space, so a sweep edited between runs would
silently run the old one; and it cannot tell a configuration whose server crashed (a result to keep) from one
interrupted with the driver (to run again). The per-trial Parquet files, written atomically with the load-points file
last, answer exactly "which configurations are done", by configuration hash, whatever happened to the driver. Tune
still runs, schedules and reports the trials of each invocation; its own state under ``tune/`` is only a log.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grid.config.schema import ConfigError, RunSpec
from grid.engines.base import engine_class, get_engine, redact
from grid.storage.parquet import set_aside_corrupt
from grid.sweep import rerun
from grid.search.plan import indistinct_notes
from grid.sweep.notes import known_notes, plan_notes
from grid.plan import TrialPlan
from grid.sweep.space import expand

if TYPE_CHECKING:
    from grid.search.plan import SearchPlan

#: Ray/Tune settings grid runs with (a user's own value wins): the classic Tune output, no usage stats, trials in the
#: driver's working directory, experiment state saved every 5 s, every worker's log lines shown.
RAY_ENVIRONMENT = {"RAY_AIR_NEW_OUTPUT": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_CHDIR_TO_TRIAL_DIR": "0",
                   "TUNE_GLOBAL_CHECKPOINT_S": "5", "RAY_DEDUP_LOGS": "0"}


def set_ray_environment() -> None:
    """Put :data:`RAY_ENVIRONMENT` into this process's environment (before Ray starts; workers inherit it)."""
    for key, value in RAY_ENVIRONMENT.items():
        os.environ.setdefault(key, value)


@dataclass
class Plan:
    all: list[TrialPlan]
    todo: list[TrialPlan]
    done: dict[str, str]
    search: SearchPlan | None = None  # what is known before launch and the search policy
    again: dict[str, str] = field(default_factory=dict)  # recorded configurations to run again -> why (rerun.py)


def plan_run(spec: RunSpec) -> Plan:
    """Every configuration, those to run (not recorded, or recorded and chosen to run again: grid/sweep/rerun.py)
    and the trial status of each recorded one."""
    plans = expand(spec)
    if spec.fresh:
        return Plan(plans, list(plans), {})
    rows = rerun.recorded_rows(spec.run_dir)
    done = {r["config_hash"]: r["trial_status"] for r in rows}
    wanted = {p.config_hash for p in plans}
    again = rerun.selected(spec, [r for r in rows if r["config_hash"] in wanted])
    todo = [p for p in plans if p.config_hash not in done or p.config_hash in again]
    return Plan(plans, todo, done, again=again)


def _before_first_trial(spec: RunSpec, plan: Plan) -> None:
    """``fresh=true``: clear the recorded results; else set aside the earlier files of what runs again."""
    if spec.fresh:
        _clear_previous(spec)
    elif plan.again:
        rerun.set_aside(spec.run_dir, plan.again)


def _clear_previous(spec: RunSpec) -> None:
    import shutil

    for sub in ("parquet", "logs"):
        shutil.rmtree(Path(spec.run_dir) / sub, ignore_errors=True)
    for name in ("search.json", "summary.json"):
        (Path(spec.run_dir) / name).unlink(missing_ok=True)


class _NoTuneResumeAdvice(logging.Filter):
    """Drops what Ray Tune logs after Ctrl-C about its own state: "Resume experiment with: Tuner.restore(...)"
    (ray/tune/tune.py) and "Failed to fetch metrics" for the trials it cut short (ray/tune/analysis/
    experiment_analysis.py). grid resumes from its Parquet tables when the same command runs again, and the report
    says what is missing."""

    DROP = ("Experiment has been interrupted", "Failed to fetch metrics")
    LOGGERS = ("ray.tune.tune", "ray.tune.analysis.experiment_analysis")

    interrupted = False  # Tune logged that Ctrl-C ended its run (its own SIGINT handler returns from fit())

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.msg)
        if message.startswith(self.DROP[0]):
            _NoTuneResumeAdvice.interrupted = True
        return not message.startswith(self.DROP)


class _NoStagingRace(logging.Filter):
    """Drops Ray Tune's error about a vanished temporary file while it copies its experiment state to storage
    (ray/tune/execution/experiment_state.py, ray/train/_internal/syncer.py): Tune saves the state by writing a
    ``.<uuid>-tmp-<name>`` file and renaming it, while the copy of the previous save may still be listing the same
    folder (ray-project/ray#60556 made the names unique; the listing race is left), and the next save copies the
    renamed file. grid resumes from its Parquet tables, never from Tune's state, so nothing is lost."""

    LOGGERS = ("ray.tune.execution.experiment_state", "ray.train._internal.syncer")

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            return not (isinstance(error, FileNotFoundError) and "-tmp-" in str(error))
        message = record.getMessage()  # the syncer's warning carries the traceback in its text
        return not ("FileNotFoundError" in message and "-tmp-" in message)


def registry_dir(spec: RunSpec) -> Path:
    """Where the run's process groups are recorded (grid.server.process.ProcessRegistry)."""
    return (Path(spec.run_dir) / "processes").resolve()


def new_run_id() -> str:
    """This invocation's id: the marker its servers carry in ``GRID_RUN_ID`` (time + random, unique per machine)."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"


def end_leftovers(spec: RunSpec, run_id: str | None, console, whose: str = "an earlier run") -> list[str]:
    """End the process groups an earlier invocation on this machine left running (grid.server.process.
    reap_leftovers), all but those of ``run_id`` (None: this run's too, once its servers are stopped); print and
    return one line per group."""
    from grid.server.process import reap_leftovers

    notes = reap_leftovers(registry_dir(spec), run_id, grace_s=spec.engine.stop_grace_s)
    for note in notes:
        console.print(f"[yellow]Leftover from {whose}:[/] {note}", highlight=False, soft_wrap=True)
    return notes


#: What a trial asks of the node it runs on, besides its ``grid_node`` slot: a sliver of the node's hardware
#: resource, so that a node declaring ``grid_hw:<name>: 1`` or one per slot both take it (Ray custom resources are
#: divisible to 1e-4, ray/_private/ray_constants.py MIN_RESOURCE_GRANULARITY).
HW_REQUEST = 0.001
#: How many times the configurations whose node was lost mid-trial run again within one invocation
#: (grid/cluster/lost.py); later losses leave them ``skipped`` for the next invocation.
NODE_LOST_ROUNDS = 2


def trial_resources(spec: RunSpec) -> dict[str, float]:
    """The Ray resources of one trial: no CPU, the node's ``grid_node`` slot (one trial per node at a time) and,
    unless ``ray.any_hardware``, the sweep's hardware resource (only nodes of ``hardware`` qualify). Pure."""
    from grid.cluster.actor import NODE_RESOURCE
    from grid.cluster.node import hw_resource

    res: dict[str, float] = {"cpu": 0, NODE_RESOURCE: 1}
    if not spec.ray.any_hardware:
        res[hw_resource(spec.hardware.name)] = HW_REQUEST
    return res


def trial_placement(spec: RunSpec, nodes: int) -> Any:
    """Tune's resource request of a trial that holds ``nodes`` nodes (a deployment across nodes,
    ``Engine.nodes_needed``): one bundle of :func:`trial_resources` per node, ``STRICT_SPREAD`` so each lands on
    another node; the trial runs in the first (Ray Tune's ``PlacementGroupFactory``)."""
    from ray.tune.execution.placement_groups import PlacementGroupFactory, resource_dict_to_pg_factory

    one = resource_dict_to_pg_factory(trial_resources(spec))
    if nodes == 1:
        return one
    return PlacementGroupFactory(one.bundles * nodes, strategy="STRICT_SPREAD")


def too_few_nodes(spec: RunSpec, plan: Plan, nodes: int, console) -> list[str]:
    """Take out of ``plan.todo`` the configurations whose deployment needs more nodes than the ``nodes`` the sweep
    may use (a trial would wait for them for ever), saying which and why; nothing is recorded, so they run when the
    sweep runs again on a cluster with enough nodes. Returns their hashes."""
    engine = get_engine(spec)
    short = {p.config_hash: (f"needs {engine.nodes_needed(p)} nodes of hardware={spec.hardware.name}; the Ray "
                             f"cluster has {nodes}") for p in plan.todo if engine.nodes_needed(p) > nodes}
    for p in (p for p in plan.todo if p.config_hash in short):
        console.print(f"[yellow]Not run:[/] {p.label} {short[p.config_hash]} (it runs when the sweep runs again on "
                      "enough nodes)", highlight=False, soft_wrap=True)
    if short and plan.search is not None:  # the search leaves them out, saying why (search.json, grid.status)
        policy = plan.search.policy
        policy.queue = [c for c in policy.queue if c.config_hash not in short]
        policy.skipped.update(short)
    plan.todo = [p for p in plan.todo if p.config_hash not in short]
    return list(short)


def _start_node_actors(spec: RunSpec, nodes: list[dict], owner, console) -> tuple[list, list[dict]]:
    """One ServerActor on each node the sweep may use (grid.cluster.node.pick_nodes), and each one's node
    (grid.cluster.node.local_node); refuses (RayStartError, exit 2) when no node matches the sweep's hardware, or a
    node's NVML GPUs are not that hardware's."""
    import ray

    from grid.cluster.actor import start_actor
    from grid.cluster.local import RayStartError
    from grid.cluster.node import hardware_mismatch, pick_nodes

    chosen, why = pick_nodes(nodes, spec.hardware.name, spec.ray.any_hardware)
    if why:
        raise RayStartError(why, "ray.any_hardware")
    actors = [start_actor(node, owner) for node in chosen]
    infos = ray.get([a.node_info.remote() for a in actors])
    for info in infos:
        wrong = None if spec.ray.any_hardware else hardware_mismatch(spec.hardware.gpu, info.get("gpu_names"))
        if wrong:
            raise RayStartError(f"node {info.get('node_hostname')} ({(info.get('node_id') or '')[:12]}) declares "
                                f"hardware={spec.hardware.name} but {wrong}; fix its grid_hw resource or set "
                                "ray.any_hardware=true", "hardware")
        gpus = len(info["gpu_uuids"]) if info.get("gpu_uuids") is not None else "no NVML"
        console.print(f"Node {info.get('node_hostname')} ({(info.get('node_id') or '')[:12]}): grid_node slot, "
                      f"GPUs: {gpus}", highlight=False)
    return actors, infos


def record_refusals(spec: RunSpec, plan: Plan, console) -> list[str]:
    """Record every configuration of ``plan.todo`` the engine refuses before launch (grid.sweep.measure.
    record_refusal: no server, no node, no Ray Tune trial) and take them out of ``plan.todo`` and out of the search
    policy's queue (as configurations already recorded). Returns their hashes. A refusal costs milliseconds here; as
    a Tune trial it cost about 5 s (24 refusals: 2m08s of the 7-minute main job)."""
    from grid.sweep.measure import record_refusal

    known = plan.search.known if plan.search is not None else {}
    candidates = [p for p in plan.todo if known.get(p.config_hash) is None or known[p.config_hash].refused]
    if not candidates:
        return []
    engine = get_engine(spec)
    refused = [p.config_hash for p in candidates if record_refusal(spec, engine, p) is not None]
    if not refused:
        return []
    if plan.search is not None:
        plan.search.policy.resume({h: None for h in refused})
        plan.search.policy.issued.extend(refused)
    plan.todo = [p for p in plan.todo if p.config_hash not in set(refused)]
    console.print(f"Recorded {len(refused)} configuration(s) refused before launch (no server, no trial)",
                  highlight=False)
    return refused


def _recalibrate(spec: RunSpec, plan: Plan, console) -> Callable[[str], None] | None:
    """After each measured configuration: update the twin's calibration with its load points that count
    (grid/search/calibration.py ``updated``), write ``calibration.json``, re-forecast the configurations not yet run and print
    the calibration; None with ``twin.calibrate=false`` or an engine the twin does not forecast."""
    search = plan.search
    if search is None or not spec.twin.calibrate or not engine_class(spec.engine.kind).forecastable():
        return None

    def after(config_hash: str) -> None:
        from grid.search.calibration import CALIBRATION_FILE, key, summary_line, updated, write

        plans = {p.config_hash: p for p in plan.all}
        try:
            cal = updated(spec, plans, search.version, config_hash, search.calibration, search.prior)
        except ValueError as e:  # a measured value the fit refuses: said, and the forecasts stay as they were
            console.print(f"[yellow]Note:[/] the twin was not recalibrated: {e}", highlight=False, soft_wrap=True)
            return
        if cal is search.calibration or cal is search.prior or not cal.sources:
            from grid.search.measured import only_host_noise

            if only_host_noise(spec, config_hash):
                console.print(f"[yellow]Note:[/] the twin was not recalibrated on {plans[config_hash].label}: every "
                              "load point it measured was host noise (not counted)", highlight=False, soft_wrap=True)
            return
        search.calibration = cal
        write(Path(spec.run_dir) / CALIBRATION_FILE, key(spec, search.version), cal)
        search.recalibrate(spec, search.version, cal.coefficients)
        console.print(summary_line(cal), highlight=False, soft_wrap=True)
    return after


def _search_args(spec: RunSpec, plan: Plan, plans: dict, console=None) -> dict:
    """Tune's search over ``plan.todo``: the search policy (grid/search/) behind Tune's ``Searcher`` API
    (grid/search/tune.py), fed with the scores read back from each finished trial's Parquet rows. Without a policy
    (no search plan): every configuration, as a grid search."""
    from ray import tune

    policy = plan.search.policy if plan.search is not None else None
    if policy is None:
        return {"param_space": {"config_hash": tune.grid_search([p.config_hash for p in plan.todo])}, "tune": {}}
    from grid.search.measured import only_host_noise, scores
    from grid.search.tune import PolicySearcher

    searcher = PolicySearcher(policy, lambda h: scores(spec, {h}).get(h), lambda h: only_host_noise(spec, h),
                              _recalibrate(spec, plan, console) if console is not None else None)
    return {"param_space": {}, "tune": {"search_alg": searcher, "num_samples": len(plan.todo)}}


def _progress(plan: Plan, plans: dict, console):
    """The console progress of ``plans`` (grid.sweep.progress): its time left counts the search's expected launches,
    when the plan has a search."""
    from grid.search.plan import expected_launches
    from grid.sweep.progress import ProgressCallback

    if plan.search is None:
        return ProgressCallback(plans, len(plan.all), console)
    return ProgressCallback(plans, len(plan.all), console, expected=expected_launches(plan.search))


def run_trials(spec: RunSpec, plan: Plan, console, run_id: str | None = None,
               before_first_trial: Callable[[], None] | None = None) -> None:
    """Run ``plan.todo`` through Ray Tune. Returns when every trial has finished (or the driver is interrupted).
    ``before_first_trial`` is called once the Ray cluster is joined and every node's actor stands (``fresh=true``
    clears the recorded results there: a cluster that cannot be joined must not cost them)."""
    set_ray_environment()
    import ray
    from ray import tune

    run_id = run_id or new_run_id()
    from grid.cluster.actor import NAMESPACE, NODE_RESOURCE, ActorOwner, grid_nodes
    from grid.sweep.trial import run_trial

    for kind in (_NoTuneResumeAdvice, _NoStagingRace):
        for name in kind.LOGGERS:
            tune_log = logging.getLogger(name)
            if not any(isinstance(f, kind) for f in tune_log.filters):
                tune_log.addFilter(kind())

    from grid.cluster.local import ray_init_args, start_ray

    init = ray_init_args(spec.ray, NAMESPACE, NODE_RESOURCE, spec.hardware.name)
    ctx = start_ray(init)
    for note in init.notes:  # after the start: it may move the dashboard to another port
        console.print(f"[yellow]Note:[/] {note}", highlight=False, soft_wrap=True)
    gcs = ctx.address_info.get("gcs_address") if hasattr(ctx, "address_info") else None
    console.print(f"Ray cluster: {'local, ' if init.local else ''}GCS at {gcs}", highlight=False)
    if spec.ray.dashboard and getattr(ctx, "dashboard_url", None):
        console.print(f"Ray dashboard: http://{ctx.dashboard_url}  (token: `ray get-auth-token`)")
    actors: list = []
    try:
        owner = ActorOwner(host=spec.engine.host, run_id=run_id, registry=str(registry_dir(spec)))
        nodes = grid_nodes()
        if not nodes:
            raise RuntimeError(f"no Ray node offers the '{NODE_RESOURCE}' resource; start workers with "
                               f"ray start --resources='{{\"{NODE_RESOURCE}\": 1}}'")
        actors, infos = _start_node_actors(spec, nodes, owner, console)
        if any(get_engine(spec).nodes_needed(p) > 1 for p in plan.todo):
            from grid.cluster.local import RayStartError
            from grid.cluster.spread import loopback_refusal

            why = loopback_refusal(spec.engine.host, [info.get("node_ip") for info in infos])
            if why is not None:
                raise RayStartError(why, "engine.host")
        if before_first_trial is not None:
            before_first_trial()
        record_refusals(spec, plan, console)
        if not plan.todo:
            return
        too_few_nodes(spec, plan, len(actors), console)
        if not plan.todo:
            return
        plans = {p.config_hash: p for p in plan.todo}
        engine = get_engine(spec)
        needed = {h: engine.nodes_needed(p) for h, p in plans.items()}

        trainable = tune.with_resources(tune.with_parameters(run_trial, spec=spec, plans=plans, owner=owner),
                                        lambda config: trial_placement(spec, needed[config["config_hash"]]))
        from grid.status import write_plan

        write_plan(spec.run_dir, plan.all, run_id, spec.hardware.name)
        from grid.cluster.lost import NodeLossCallback

        storage = str((Path(spec.run_dir) / "tune").resolve())
        todo = [p.config_hash for p in plan.todo]
        search = _search_args(spec, plan, plans, console)
        for round_ in range(NODE_LOST_ROUNDS + 1):  # the first pass, then the configurations whose node was lost
            lost = NodeLossCallback(spec, plans, console)
            progress = _progress(plan, plans, console)
            # Tune keeps one trial pending at a time behind a custom searcher unless max_concurrent_trials is set
            # (ray.tune.execution.tune_controller _get_max_pending_trials): trials then start one after another,
            # and where a trial's start takes longer than its measurement (a busy head node) nodes sit idle
            # reuse_actors: a trial's function runs in the actor the previous one on that node ran in (no process
            # start and imports per trial, about 3 s each on 2 cores); it owns nothing between trials: the server
            # is the node actor's (grid/cluster/actor.py)
            concurrent: dict[str, Any] = {}
            if "search_alg" in search["tune"]:
                concurrent["max_concurrent_trials"] = len(nodes)
            tuner = tune.Tuner(
                trainable,
                param_space=search["param_space"],
                tune_config=tune.TuneConfig(
                    **search["tune"], **concurrent, reuse_actors=True,
                    trial_name_creator=lambda t: f"{spec.name}:{plans[t.config['config_hash']].label}",
                    trial_dirname_creator=lambda t: t.config["config_hash"]),
                run_config=tune.RunConfig(name=f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}-{round_}",
                                          storage_path=storage, verbose=0,
                                          callbacks=[progress, lost],
                                          failure_config=tune.FailureConfig(max_failures=0)),
            )
            _NoTuneResumeAdvice.interrupted = False
            tuner.fit()
            if _NoTuneResumeAdvice.interrupted:  # Ctrl-C: Tune saved its state and returned; grid stops, exits 130
                raise KeyboardInterrupt
            todo = lost.lost
            if not todo or round_ == NODE_LOST_ROUNDS or not grid_nodes():
                break
            console.print(f"Running {len(todo)} configuration(s) again whose node was lost", highlight=False)
            # the search already chose them: they run again as they are
            search = {"param_space": {"config_hash": tune.grid_search(todo)}, "tune": {}}
    finally:
        for actor in actors:
            try:
                ray.get(actor.stop.remote(spec.engine.stop_grace_s), timeout=spec.engine.stop_grace_s + 30)
            except Exception:  # the actor may be gone already; its process group died with it
                pass
        ray.shutdown()
        # whatever this run started and is still there (nothing, normally) ends with it; ended groups are unrecorded
        end_leftovers(spec, None, console, "this run")


def _print_deployment(spec: RunSpec, engine, plan, search, console) -> None:
    """A dry run's lines for a plan of several servers: where each runs and its command, then the twin's forecast of
    the deployment under the objective (grid/twin/deployment.py)."""
    import dataclasses


    deployment = plan.deployment
    try:
        places = deployment.place(spec.hardware)
    except ValueError:
        places = []
    groups = [g for g in deployment.groups for _ in range(g.count)]
    port = spec.engine.port or 30000
    launch = engine.launch_plan(plan, port) if places and engine.serves_deployments else None
    for i, group in enumerate(groups):
        where = ("not placed" if not places else f"node {places[i].node}, the host's cores" if not places[i].gpus
                 else f"node {places[i].node}, GPUs {','.join(map(str, places[i].gpus))}")
        if launch is not None and launch.members:  # the commands the trial runs, each on its port
            command = launch.member_commands[i]
        else:  # the twin plays them all: what SGLang would run for each, each on its own port
            settings = group.settings_over(plan.settings, launch=True)
            command = engine.launch_plan(dataclasses.replace(plan, settings=settings, deployment=None), port + i).command
        console.print(f"  [{group.role} {i}: {where}] {command}", soft_wrap=True, markup=False)
    if launch is not None and launch.members:
        console.print(f"  [router] {redact(launch.argv)}", soft_wrap=True, markup=False)
    _print_forecast(spec, plan, search, console, f" ({deployment.gpus} GPUs, router {deployment.router_policy})")


def _print_forecast(spec: RunSpec, plan, search, console, where: str = "") -> None:
    """A dry run's line of the twin's forecast of ``plan`` under the objective (none when the twin has none)."""
    from grid.report.select import OBJECTIVES

    f = search.forecasts.get(plan.config_hash)
    obj = OBJECTIVES[spec.objective.kind]
    if f is not None:
        value = f"{obj.metric} {f.value:.4g}" if f.value is not None else "no load point meets the objective's SLOs"
        console.print(f"  twin forecast: {value}{where}", soft_wrap=True, markup=False, highlight=False)


def run(spec: RunSpec, console, accepted: Callable[[], None] | None = None) -> Plan:
    """Plan, check and run the sweep (or print it with dry_run). Returns the plan. ``accepted`` is called once
    nothing refuses the run (after the engine's check, before anything in the run directory changes; never for a dry
    run): grid.run writes the resolved config there, so a refused command never replaces that of recorded results."""
    set_ray_environment()
    engine = get_engine(spec)
    expand(spec)  # an empty search space raises ConfigError here, before anything is touched or launched
    rerun.check(spec)  # so does a rerun value that can never match
    if not spec.dry_run:
        for note in set_aside_corrupt(spec.run_dir):
            console.print(f"[yellow]Set aside damaged Parquet file[/] {note}", markup=True, highlight=False)
    plan = plan_run(spec)
    version = engine.version()
    notes = [*engine.notes, *engine.workload_notes(spec.load), *plan_notes(spec, plan.all, version)]
    search = plan_search(spec, engine, plan, version)
    notes += known_notes(plan.all, search.known) + indistinct_notes(spec, search)
    for note in notes:
        console.print(f"[yellow]Note:[/] {note}", highlight=False, soft_wrap=True)
    if search.calibration is not None:
        from grid.search.calibration import summary_line

        source = f"twin.calibration={spec.twin.calibration}" if search.prior is not None else "this run's recorded points"
        console.print(f"Forecasts from the twin calibrated on {source}. " + summary_line(search.calibration),
                      highlight=False, soft_wrap=True)
    for line in search.cost_lines(spec):
        console.print(line, highlight=False, soft_wrap=True)
    if spec.dry_run:
        from grid.sweep.trial import dry_run_nodes

        nodes = dry_run_nodes(spec)
        for p in plan.all:
            state = plan.done.get(p.config_hash, "pending")
            if p.config_hash in plan.again:
                state = f"{state}, runs again: {plan.again[p.config_hash]}"
            known = search.known[p.config_hash]
            state = f"refused: {known.refused}" if known.refused else \
                f"{state}, {known.text()}" if known.known_to_fail else state
            console.print(f"[bold]{p.label}[/] ({p.config_hash}, {state})", soft_wrap=True)
            if p.deployment is not None:
                _print_deployment(spec, engine, p, search, console)
                continue
            for node in nodes:
                console.print(f"  [{node}] " + engine.launch_plan(p, spec.engine.port or 30000).command,
                              soft_wrap=True, markup=False)
            if not known.refused:
                _print_forecast(spec, p, search, console)
        from grid.report.select import OBJECTIVES, slo_text
        from grid.report.disaggregation import pd_verdict

        obj = OBJECTIVES[spec.objective.kind]
        verdict = pd_verdict([p for p in plan.all if not search.known[p.config_hash].refused],
                             {h: (f.value if f else None) for h, f in search.forecasts.items()},
                             obj.higher_is_better, obj.unit)
        if verdict is not None:
            slos = slo_text(spec.objective.slo)
            console.print(f"{verdict} (objective {spec.objective.kind}" + (f", SLOs {slos})" if slos else ")"),
                          soft_wrap=True, markup=False, highlight=False)
        return plan
    several = [p.label for p in plan.todo if p.deployment is not None and not search.known[p.config_hash].refused]
    if several and not engine.serves_deployments:
        raise ConfigError(
            f"sweep.deployments: {len(several)} configuration(s) deploy several servers behind a router "
            f"({'; '.join(several[:3])}{'; ...' if len(several) > 3 else ''}): grid plans, checks and forecasts them "
            f"(dry_run=true prints each server's command and the twin's forecast), but engine={spec.engine.kind} "
            "cannot launch several servers for one trial (engine=sim, the twin, serves them, and engine=sglang "
            "on one node or several; docs/topology.md); "
            "measure one-server deployments (count 1) meanwhile")
    engine.check_runnable()
    if accepted is not None:
        accepted()
    engine.prepare(spec.run_dir)
    skipped = len(plan.all) - len(plan.todo)
    engine_label = f"SGLang {version}" if version[:1].isdigit() else version  # an external server: "vllm 0.32.0"
    console.print(f"[bold]{spec.name}[/]: {len(plan.all)} configurations on {spec.engine.kind} ({engine_label}), "
                  f"{spec.model.name} on {spec.hardware.name}; {skipped} already recorded, {len(plan.todo)} to run")
    if plan.again:
        labels = {p.config_hash: p.label for p in plan.all}
        console.print(f"Running {len(plan.again)} recorded configuration(s) again (their earlier files are kept in "
                      f"parquet/{rerun.SUPERSEDED}/): " + "; ".join(f"{labels[h]} ({why})" for h, why in plan.again.items()),
                      highlight=False, soft_wrap=True)
    run_id = new_run_id()
    end_leftovers(spec, run_id, console)
    if plan.todo:
        try:
            # fresh=true clears the recorded results, and a re-run sets its configurations' earlier files aside, only
            # once nothing refuses the run and the cluster is joined
            run_trials(spec, plan, console, run_id, before_first_trial=lambda: _before_first_trial(spec, plan))
        finally:
            record_search(spec, plan)
    return plan


def plan_search(spec: RunSpec, engine, plan: Plan, version: str) -> SearchPlan:
    """Assess every configuration before launch (refused, known to fail), forecast them on the twin, set up
    ``spec.search``'s policy over ``plan.todo`` (resumed with the scores already recorded) and put ``plan.todo`` in
    launch order: refused first (no launch), known failures last (first with ``search.try_known_failures``).
    Returns the search plan (also set as ``plan.search``)."""
    from grid.search.calibration import starting
    from grid.search.measured import scores
    from grid.search.plan import build

    prior, cal = starting(spec, {p.config_hash: p for p in plan.all}, version) \
        if engine_class(spec.engine.kind).forecastable() else (None, None)
    search = plan.search = build(spec, engine, plan.all, version, cal.coefficients if cal else None)
    search.prior, search.calibration = prior, cal
    recorded = {h for h in plan.done if h not in {p.config_hash for p in plan.todo}}
    if recorded:
        known = scores(spec, recorded)
        search.resume({h: known.get(h) for h in recorded})
    order = {c.config_hash: i for i, c in enumerate(search.policy.queue)}
    plan.todo = sorted(plan.todo, key=lambda p: order.get(p.config_hash, len(order)))
    return search


def record_search(spec: RunSpec, plan: Plan) -> None:
    """``search.json`` in the run directory: the search, what it launched and what it left out and why."""
    from grid.search.measured import write_record

    if plan.search is None:
        raise ValueError("record_search: the plan has no search (plan_search was not run)")
    from grid.search.intervals import intervals

    policy = plan.search.policy
    labels = {p.config_hash: p.label for p in plan.all}
    ranges = intervals(policy.candidates, policy.measured, policy.higher_is_better, policy.twin_error, policy.spread,
                       before=policy.forecast_before)
    write_record(spec.run_dir, {
        "search": spec.search.kind,
        "issued": policy.issued,
        "skipped": {h: {"label": labels.get(h), "reason": why} for h, why in policy.skipped.items()},
        "known_to_fail": {h: {"label": labels.get(h), "text": k.text()} for h, k in plan.search.known.items()
                          if k.known_to_fail},
        "calibrated": plan.search.calibration is not None, "objective": spec.objective.kind,
        "forecasts": {h: {"label": labels.get(h), "forecast": i.forecast, "expected": i.expected, "low": i.low,
                          "high": i.high, "measured": i.measured} for h, i in ranges.items()},
    })
