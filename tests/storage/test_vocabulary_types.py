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
    assert [c for c, k in TRIAL_CLASSES.items() if not k.charged] == ["env_dirty", "port_in_use", "actor_lost",
                                                                      "node_lost"]
    assert [c for c, k in TRIAL_CLASSES.items() if k.phase == "startup"] == [
        "startup_exit", "startup_oom", "startup_timeout", "external_unreachable", "port_in_use"]
    assert status_of("stall_timeout") == "failed" and status_of(None) == "failed"
    assert status_of("garbage_output") == "invalid" and status_of("node_lost") == "skipped"
