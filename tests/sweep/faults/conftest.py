"""The fault suite's fixture: ``trial`` runs one trial against the twin without Ray (tests/sweep/faults/faultkit.py)."""

import pytest

from tests.sweep.faults.faultkit import run_trial


@pytest.fixture
def trial():
    return run_trial
