"""A small recorded sweep written with grid's own writers (grid.storage), for the report and comparison tests.

``record(run_dir, plans, outcomes)`` writes one trial per plan: ``outcomes[i]`` is either a dict of load level ->
(output tok/s, TPOT median ms, TTFT median ms) for an ``ok`` trial, or a (status, error class, message, log tail)
tuple for a failed/invalid one. Every ok load point gets 4 requests (TTFT as given, p99 = 2 x median), the window
columns of its load's ``closed_loop_start`` (steady state: 1 + level warm-up and level tail requests)
and real timestamps: launch at t0 + 10 s x index, ready 2 s later, each load point 3 s.
"""

from grid.storage.parquet import write_trial
from grid.storage.schema import load_point_row

T0 = 1_700_000_000_000_000_000
S = 1_000_000_000


def record(run_dir, plans, outcomes, engine="sim", version="0.5.9", command="python -m grid.twin --port 1"):
    for i, (plan, outcome) in enumerate(zip(plans, outcomes)):
        base = dict(config_hash=plan.config_hash, trial_id=f"t{i}", label=plan.label, command=command,
                    config_json=plan.config_json, engine=engine, engine_version=version, model="m", hardware="h",
                    input_len=plan.load.input_len, output_len=plan.load.output_len, time_scale=10.0,
                    launch_unix_ns=T0 + 10 * S * i, ready_unix_ns=T0 + 10 * S * i + 2 * S)
        points, requests = [], []
        if isinstance(outcome, tuple):
            status, cls, message, tail = outcome
            for idx, level in enumerate(plan.load.concurrency):
                points.append(load_point_row({}, **base, trial_status=status, trial_error_class=cls,
                                             trial_error_message=message, log_tail=tail, point_index=idx,
                                             point_kind="concurrency", point_value=float(level), status="not_run",
                                             num_prompts=4))
        else:
            steady = plan.load.closed_loop_start == "staggered"
            for idx, (level, (tok, tpot, ttft)) in enumerate(outcome.items()):
                start = T0 + 10 * S * i + (2 + 3 * idx) * S
                window = ({"window_kind": "steady_state", "warmup_requests_run": 1 + level, "tail_requests_run": level} if steady else {"window_kind": "all_requests", "warmup_requests_run": 1,
                                                              "tail_requests_run": 0})
                points.append(load_point_row(
                    {"requests_total": 4, "completed": 4, "failed": 0, "duration_s": 30.0, "output_tok_per_s": tok,
                     "tpot_median_ms": tpot, "tpot_p99_ms": 2 * tpot, "ttft_median_ms": ttft,
                     "ttft_p99_ms": 2 * ttft, **window},
                    **base, trial_status="ok", point_index=idx, point_kind="concurrency", point_value=float(level),
                    num_prompts=4, status="ok", started_unix_ns=start, finished_unix_ns=start + 3 * S))
                requests += [{"config_hash": plan.config_hash, "point_index": idx, "request_index": r,
                              "status": "ok", "ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": ttft + 100 * tpot}
                             for r in range(4)]
        write_trial(run_dir, plan.config_hash, {"requests": requests, "load_points": points})
