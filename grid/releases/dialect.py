"""A server family's dialect: how grid speaks to it, named once per family and carried by each engine
(``Engine.dialect``, grid/engines/base.py).

Everything the shared code needs to know about a launched server's family, besides its command line (which the
engine builds): how a setting is validated for a release and rendered as flags, which path says the server is ready,
and whether grid's knowledge of SGLang (the twin's forecasts and failure table, the launch rules' start-stage
failures) describes it. A second launched engine (vLLM, say) is an engine module with its own :class:`Dialect` and
a config file in conf/engine; the sweep, search, report and server layers ask the engine's dialect, never a family's
module by name (docs/architecture.md "How to add").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from grid.releases import flags

Version = tuple[int, ...]


@dataclass(frozen=True)
class Dialect:
    """What grid knows of one server family.

    ``check_setting(name, value, version)``: the value coerced to the setting's type; raises ``ValueError`` (a
    ``flags.SettingError`` for SGLang) naming the key and the allowed values. ``render(settings, version)``: the
    settings as the family's command-line flags. ``ready_path``: the GET path that answers 200 once the server
    serves (SGLang's ``/health_generate`` runs one decode step; 503 while warming up). ``twin_knows``: the twin's
    performance model, failure table and SGLang's launch rules describe this family, so grid forecasts its
    configurations and names their known failures before launch."""

    name: str
    check_setting: Callable[[str, Any, Version], Any]
    render: Callable[[dict[str, Any], Version], list[str]]
    ready_path: str
    twin_knows: bool


#: SGLang (and its twin, which takes SGLang's flags and serves its HTTP API): settings by meaning rendered per
#: release from the catalog (grid/releases/flags.py); readiness by ``/health_generate`` (SGLang
#: python/sglang/srt/entrypoints/http_server.py: 503 until the first decode after warm-up succeeds).
SGLANG = Dialect("sglang", flags.check_setting, flags.to_argv, "/health_generate", twin_knows=True)
