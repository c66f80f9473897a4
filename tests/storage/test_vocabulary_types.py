"""The Literal types of grid/server/statuses.py spell exactly the values of the vocabulary table's columns they type
(grid/storage/vocabulary.py)."""

from typing import get_args

from grid.server.statuses import ProbeStatus
from grid.storage.vocabulary import TYPED_COLUMNS, VOCABULARY


def test_each_literal_lists_its_columns_values_in_the_tables_order():
    for column, literal in TYPED_COLUMNS.items():
        assert list(get_args(literal)) == [value for col, value, _ in VOCABULARY if col == column], column


def test_probe_status_matches_the_probe_status_column():
    from grid.server.probe import ProbeResult
    from grid.storage.schema import LOAD_POINT_ORCHESTRATION_COLUMNS

    doc = next(desc for name, _, _, desc in LOAD_POINT_ORCHESTRATION_COLUMNS if name == "probe_status")
    assert doc.startswith("correctness probe: passed | failed | skipped")
    assert get_args(ProbeStatus) == ("passed", "failed", "skipped")
    assert {ProbeResult(True).status, ProbeResult(False).status, ProbeResult(True, skipped=True).status} == set(
        get_args(ProbeStatus))


def test_trial_classes_map_every_class_to_the_status_its_meaning_names():
    from grid.server.statuses import TRIAL_CLASSES, TrialErrorClass, status_of

    assert list(TRIAL_CLASSES) == list(get_args(TrialErrorClass))
    for col, value, meaning in VOCABULARY:
        if col == "load_points.trial_error_class":
            assert meaning.startswith(f"{TRIAL_CLASSES[value].status}:"), value
    assert [c for c, k in TRIAL_CLASSES.items() if not k.charged] == [
        "external_unreachable", "env_dirty", "port_in_use", "actor_lost", "node_lost"]
    assert [c for c, k in TRIAL_CLASSES.items() if k.phase == "startup"] == [
        "startup_exit", "startup_kv_pool", "startup_oom", "startup_timeout", "external_unreachable", "port_in_use"]
    assert status_of("stall_timeout") == "failed" and status_of(None) == "failed"
    assert status_of("garbage_output") == "invalid" and status_of("node_lost") == "skipped"


def test_every_failure_class_is_declared_once_with_its_wordings():
    """grid/server/statuses.py FAILURE_CLASSES: each wording matches its own example line, names its source, and no
    example is claimed by a class tried before its own in the classifier that reads it."""
    from grid.server.logparse import RUNTIME_CLASSES, runtime_error
    from grid.server.statuses import FAILURE_CLASSES, STARTUP_LOG_CLASSES, TrialErrorClass, log_class

    assert [c.name for c in FAILURE_CLASSES] == list(get_args(TrialErrorClass))
    for c in FAILURE_CLASSES:
        for w in c.wordings:
            assert w.regex.search(w.example), (c.name, w.pattern)
            assert w.source, c.name
            if c.name in STARTUP_LOG_CLASSES:
                assert log_class(w.example, STARTUP_LOG_CLASSES) == c.name, w.example
            if c.name in RUNTIME_CLASSES:
                assert runtime_error(w.example)[0] == c.name, w.example  # type: ignore[index]
    assert [c.name for c in FAILURE_CLASSES if c.wordings] == [
        "startup_kv_pool", "startup_oom", "nan_output", "runtime_oom", "nccl_error", "cuda_error", "port_in_use"]


def test_a_kv_pool_too_small_is_not_an_oom():
    """SGLang's and vLLM's 'no room for a KV pool' (raise the memory fraction) is its own class, the other end of the
    memory budget from startup_oom (lower it); each class's meaning says which way to move the fraction."""
    from grid.server.statuses import FAILURE_CLASS, STARTUP_LOG_CLASSES, log_class

    sglang = ("[2026-12-02 08:27:44] Scheduler hit an exception: Traceback (most recent call last):\n"
              "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
              "self.server_args.mem_fraction_static=0.3\n")
    vllm = "(EngineCore_DP0 pid=1) ValueError: No available memory for the cache blocks. Try increasing ..."
    assert log_class(sglang, STARTUP_LOG_CLASSES) == log_class(vllm, STARTUP_LOG_CLASSES) == "startup_kv_pool"
    assert log_class("torch.OutOfMemoryError: CUDA out of memory.", STARTUP_LOG_CLASSES) == "startup_oom"
    assert log_class("Received sigquit from a child process.", STARTUP_LOG_CLASSES) is None
    assert "raise mem_fraction_static" in FAILURE_CLASS["startup_kv_pool"].meaning
    assert "lower mem_fraction_static" in FAILURE_CLASS["startup_oom"].meaning


def test_each_twin_line_is_matched_by_its_class_and_the_classifiers_lists_are_derived():
    from grid.server.logparse import OUTPUT_ERROR_CLASSES, RUNTIME_CLASSES, runtime_error
    from grid.server.statuses import FAILURE_CLASSES, STARTUP_LOG_CLASSES
    from grid.twin.faults import RUNTIME_ERROR_LINES

    lines = {c.name: c.twin_line.format(total=79.19) for c in FAILURE_CLASSES if c.twin_line is not None}
    assert set(lines) == {"nan_output", "runtime_oom", "nccl_error", "cuda_error"}
    for name, line in lines.items():
        assert runtime_error(line) == (name, line)  # the log classifier names the class from the twin's own line
    assert RUNTIME_CLASSES == ("nan_output", "runtime_oom", "nccl_error", "cuda_error")
    assert STARTUP_LOG_CLASSES == ("startup_kv_pool", "startup_oom", "port_in_use")
    assert OUTPUT_ERROR_CLASSES == {"nan_output"}
    assert set(RUNTIME_ERROR_LINES) == {"runtime_oom", "nccl_error", "cuda_error"}  # what breaks the server


def test_request_error_classes_are_declared_once():
    import typing

    from grid.loadgen.records import ERROR_CLASSES, REQUEST_ERROR_CLASSES
    from grid.server.statuses import RequestErrorClass
    from grid.storage.schema import REQUEST_COLUMNS

    assert typing.get_args(RequestErrorClass) == ERROR_CLASSES == tuple(REQUEST_ERROR_CLASSES)
    (desc,) = [d for name, _, _, d in REQUEST_COLUMNS if name == "error_class"]
    assert all(c in desc for c in ERROR_CLASSES)
