"""fresh=true clears the recorded results only once the run can go ahead: a refused engine or a Ray cluster that
cannot be joined must not cost them (grid.sweep.driver)."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from grid.cluster.local import RayStartError
from grid.sweep import driver
from tests.sweep.test_measure import spec_for


def test_fresh_run_whose_cluster_cannot_be_joined_keeps_the_recorded_results(tmp_path, monkeypatch):
    recorded = tmp_path / "parquet" / "load_points" / "a.parquet"
    recorded.parent.mkdir(parents=True)
    pq.write_table(pa.table({"config_hash": ["a"], "trial_status": ["ok"]}), recorded)
    (tmp_path / "summary.json").write_text("{}")

    def unreachable(init):
        raise RayStartError("cannot join the Ray cluster at ray.address=127.0.0.1:1: timed out", setting="ray.address")

    monkeypatch.setattr("grid.cluster.local.start_ray", unreachable)
    spec = spec_for(tmp_path, "fresh=true", "ray.address=127.0.0.1:1")
    with open(tmp_path / "out.txt", "w") as out, pytest.raises(RayStartError, match="cannot join"):
        driver.run(spec, Console(file=out))
    assert pq.read_table(recorded).to_pydict() == {"config_hash": ["a"], "trial_status": ["ok"]}
    assert (tmp_path / "summary.json").read_text() == "{}"
