"""The twin's performance model of a server command line, as grid's pre-launch knowledge, notes and report use it
without starting a server: the flags parsed and checked by the twin's argparse for that SGLang release (the same
checks the twin server applies at launch), then ``PerfModel`` on the model and hardware specs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from grid.twin import cli
from grid.twin.perf import PerfModel


def perf_model(model: Any, hardware: Any, flags: Sequence[str], version: str,
               env: Mapping[str, str] | None = None) -> PerfModel | None:
    """``PerfModel`` of SGLang ``version`` launched with ``flags`` (argv, without ``--model-path``) on ``model`` /
    ``hardware`` (``ModelSpec`` / ``HardwareSpec``); ``env`` is the server's environment (the speculative acceptance
    length, grid/twin/speculative.py). None when the twin refuses the flags, as SGLang would. On a CPU host
    (``hardware.vendor: cpu``) the model is the calibration's starting point (``PerfModel.on_host``); the
    twin's server does not play it (grid/releases/checks.py rule ``twin_cpu_host``)."""
    try:
        args = cli.parse_args(["--model-path", "m", *flags], version)
        cli.resolve_args(args, model)
        cfg = cli.to_serving_config(args, cli.accept_length_from(env or {}))
        return PerfModel(model, hardware, cfg)
    except (SystemExit, ValueError, AssertionError, KeyError):
        return None
