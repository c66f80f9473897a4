"""A second launched engine is a module and a config file: the engine dialect (grid/releases/dialect.py).

The toy family here is not SGLang: its own setting (``max_num_seqs``, rendered ``--max-num-seqs``), its own readiness
path (``/ping``; it has no ``/health_generate``), an OpenAI API, and nothing grid's SGLang knowledge describes. Its
engine is the class below (what a module in grid/engines would hold) and its config the file the test writes (what
conf/engine/toy.yaml would hold). Nothing else is edited: the settings check, the launch, the readiness wait, the
load points, the search's knowledge and the report's launch command all ask the engine's dialect. The server is a
real process (tests/fixtures/toy_server.py) that records its command line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from grid.compose import compose_spec
from grid.config.schema import ConfigError
from grid.engines.base import ENGINES, Engine, LaunchPlan, get_engine, register
from grid.plan import TrialPlan
from grid.releases.dialect import SGLANG, Dialect
from grid.server.session import ServerSession
from grid.sweep.measure import measure_trial
from grid.sweep.space import expand

SCRIPT = Path(__file__).resolve().parents[1] / "fixtures" / "toy_server.py"


def _check(name: str, value: Any, version: tuple[int, ...]) -> Any:
    if name != "max_num_seqs":
        raise ValueError(f"server.{name}: not a toy setting; allowed: max_num_seqs")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"server.max_num_seqs: expected an integer >= 1, got {value!r}")
    return value


def _render(settings: dict[str, Any], version: tuple[int, ...]) -> list[str]:
    return [a for k, v in sorted(settings.items()) if v is not None for a in (f"--{k.replace('_', '-')}", str(v))]


TOY = Dialect("toy", _check, _render, "/ping", twin_knows=False)


class ToyEngine(Engine):
    kind = "toy"
    dialect = TOY

    def version(self) -> str:
        return "toy 1.0"

    def check_runnable(self) -> None:
        """The toy server is a script of this repository: it runs wherever the tests do."""

    def launch_plan(self, trial: TrialPlan, port: int) -> LaunchPlan:
        argv = [sys.executable, str(SCRIPT), *self.dialect.render(trial.settings, ()),
                "--argv-file", f"{self.spec.run_dir}/argv.json", *self.common_args(port)]
        return LaunchPlan(argv, {}, self.spec.engine.host, port, 1.0, 1.0)


@pytest.fixture(autouse=True)
def toy_engine_registered():
    """The toy engine registered as its module would register it on import; taken out again after each test, so
    other tests see only grid's engines."""
    register(ToyEngine)
    yield
    ENGINES.pop("toy", None)


def _config(tmp_path: Path, server: str = "max_num_seqs: 8") -> Path:
    conf = tmp_path / "conf" / "engine"
    conf.mkdir(parents=True)
    (conf / "toy.yaml").write_text(f"# @package _global_\nengine:\n  kind: toy\n  api: completions\n"
                                   f"  startup_timeout_s: 60\nserver:\n  {server}\n")
    return conf.parent


def _spec(tmp_path: Path, *overrides: str):
    conf = _config(tmp_path / "c")
    return compose_spec(["engine=toy", f"hydra.searchpath=[file://{conf}]", "model=llama3_1_8b", "hardware=h100_x1",
                         "load.concurrency=[2]", "load.min_prompts=4", "load.input_len=16", "load.output_len=8",
                         "probe.enabled=false", *overrides], tmp_path / "run")


def test_the_toy_config_composes_with_its_own_settings_and_refuses_sglangs(tmp_path):
    spec = _spec(tmp_path)
    assert spec.engine.kind == "toy" and spec.server == {"max_num_seqs": 8}
    with pytest.raises(ConfigError, match=r"server.cuda_graph: not a toy setting; allowed: max_num_seqs"):
        _spec(tmp_path / "b", "+server.cuda_graph=false")
    with pytest.raises(ConfigError, match=r"engine.kind='nope'; allowed: .*openai.*sglang.*sim"):
        compose_spec(["engine.kind=nope"], tmp_path / "c2")


def test_the_toy_server_is_launched_judged_ready_by_its_path_and_measured(tmp_path):
    spec = _spec(tmp_path)
    engine = get_engine(spec)
    assert type(engine) is ToyEngine and not engine.forecastable() and SGLANG.twin_knows
    plan = expand(spec)[0]
    rows = measure_trial(spec, engine, plan, ServerSession(clean_wait_s=5), trial_id="t0")
    assert [(r["status"], r["trial_status"]) for r in rows] == [("ok", "ok")], rows[0].get("trial_error_message")
    assert rows[0]["output_tok_per_s"] > 0 and rows[0]["engine_version"] == "toy 1.0"
    argv = json.loads((Path(spec.run_dir) / "argv.json").read_text())
    assert argv[:2] == ["--max-num-seqs", "8"] and "--port" in argv  # rendered by the toy dialect, not SGLang's


def test_sglangs_knowledge_stays_out_of_the_toy_family(tmp_path):
    from grid.report.context import real_command
    from grid.report.select import Verdict
    from grid.search.knowledge import failures
    from grid.search.plan import build

    spec = _spec(tmp_path)
    engine = get_engine(spec)
    plans = expand(spec)
    assert failures(spec, plans[0], engine.version()) == ()  # no twin failure table, no SGLang start rules
    sp = build(spec, engine, plans, engine.version())
    assert all(c.forecast is None for c in sp.policy.candidates)  # no twin forecast of another family
    verdict = Verdict(plans[0].config_hash, plans[0].label, "best", 1.0, "", rows=[{"engine_version": "toy 1.0"}])
    assert real_command(spec, verdict) is None  # no "python -m sglang.launch_server" line for a toy server
