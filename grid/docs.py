"""docs/schema.md and grid/storage/rows.py, generated: ``python -m grid.docs`` rewrites them
(tests/storage/test_schema.py fails while either is stale).

It joins what lives in several layers: the Arrow schemas, summary.json and the status and error-class table
(grid/storage: ``describe_schema``, whose class rows come from grid/server/statuses.py ``FAILURE_CLASSES``), the
objectives (grid/report/select.py), calibration.json (grid/search/calibration.py) and the pre-run cost estimate
(grid/search/plan.py). Run it after changing any
of them, e.g. after adding a failure class (docs/architecture.md "How to add").
"""

from __future__ import annotations

from pathlib import Path

from grid.report.select import describe_objectives
from grid.search.calibration import describe_file as describe_calibration
from grid.search.measured import describe_search_file
from grid.search.plan import describe_cost
from grid.storage.schema import describe_schema, rows_module

#: Where the generated file lives in a source checkout.
SCHEMA_DOC = Path(__file__).resolve().parents[1] / "docs" / "schema.md"
#: The typed load-point row generated from the schema (grid.storage.schema.rows_module).
ROWS_MODULE = Path(__file__).resolve().parent / "storage" / "rows.py"

SCHEMA_DOC_HEADER = """# Parquet schema

grid writes two Parquet tables per run, `requests` (one row per request) and `load_points` (one row per
configuration x load point), plus `server_log`. Every column carries `unit` and `description` metadata in the Arrow
schema; this page is generated from it (`grid.storage.schema.describe_schema()`). Regenerate it after changing the
schema with:

```bash
python -m grid.docs
```

`tests/storage/test_schema.py::test_schema_doc_is_current` fails while this page is stale. An empty unit means the
column has none (identifiers, labels, text, JSON).

Read a table with `grid.read_results(run_dir, "load_points")` (a pandas DataFrame) or
`grid.storage.parquet.read_table` (an Arrow table): files written by different grid versions carry different columns,
and these readers unify the schemas of every file (`pa.unify_schemas` over a `pyarrow.dataset`), so a column missing
from some files is null in their rows instead of being dropped for all (what `pd.read_parquet` on the folder does when
the first file lacks it). DuckDB: `read_parquet('.../*.parquet', union_by_name=true)`.

Request outcomes worth knowing: a stream counts as complete when it ends after an event with a `finish_reason` even
without `data: [DONE]` (`done_marker` says which); `truncated_stream` is a stream with neither. `decode_error` is data
that is not UTF-8 (e.g. a multi-byte character cut off at the end of the stream), `parse_error` valid UTF-8 that is
not the expected JSON. With `load.max_concurrency`, an open-loop request that is due while that many are in flight
waits on the client for a slot: `slot_wait_ms`; its latencies count from the actual send, and `client_queue_ms`
(scheduled to actual send) includes the wait.

The report adds `parquet/rejudged/rejudged.parquet` (table `rejudged` below): the SLO-dependent values it judged
every load point by, for the objective it ranked with. `load_points` keeps the values of the SLOs each point was
measured under (a resumed or re-reported run may use other SLOs); join the two on `config_hash` + `point_index` to
see the numbers the report shows. Every report rewrites it.

The timeline of a sweep (report.html) comes from `launch_unix_ns` / `ready_unix_ns` (a configuration's launch,
readiness wait and correctness probe) and `started_unix_ns` / `finished_unix_ns` (each load point). Repeated load
points, if a run holds any (the same `config_hash`, `point_kind` and `point_value` more than once), are what
`python -m grid.compare` measures the spread from.

The measured window of a load point (`window_kind`): closed loops measured in steady state (`steady_state`, the
default `load.closed_loop_start=staggered`) run a warm-up wave whose output lengths spread the streams' phases over one
request time, the measured requests, then tail requests
that keep every stream busy until the last measured request ends; the window is the first measured send to that end,
and throughputs count tokens by the arrival time of their event inside it, from every request of the point (AIPerf's
`--steady-state`: "only tokens emitted during the measurement window are counted",
https://github.com/nvda-ci/aiperf/blob/main/docs/tutorials/steady-state.md; GuideLLM's `output_tokens_per_second`
over each request's token timings between warm-up and cool-down, https://github.com/vllm-project/guidellm
`src/guidellm/benchmark/schemas/metrics.py`). `all_requests` (closed loops started together, open loops, traces) counts
the measured requests whole from the first send to the last end, as SGLang's bench_serving does
(python/sglang/benchmark/serving.py `calculate_metrics`). `warmup_requests_run` and `tail_requests_run` say what ran
around the window; per-request latencies always come from the measured requests (the `requests` table).

"""


def schema_doc() -> str:
    """docs/schema.md's text: the header above, the schemas and status table, the objectives and the cost estimate."""
    return (SCHEMA_DOC_HEADER + describe_schema() + "\n" + describe_calibration() + "\n" + describe_search_file()
            + "\n" + describe_objectives() + "\n" + describe_cost())


def main() -> None:
    """Rewrite docs/schema.md and grid/storage/rows.py and say where."""
    SCHEMA_DOC.write_text(schema_doc())
    ROWS_MODULE.write_text(rows_module())
    print(f"wrote {SCHEMA_DOC} and {ROWS_MODULE}")


if __name__ == "__main__":
    main()
