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
