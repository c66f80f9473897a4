"""``engine=openai``: benchmark a server that is already running at ``engine.base_url`` (any OpenAI-compatible
engine, or an SGLang server with its native /generate). Nothing is launched or stopped: the trial measures it through
grid/server/external.py, with the same load points, Parquet tables and report as a launched server.

The server's own settings are whatever it was started with; the sweep's settings only label the trial. Its version
is the one /server_info reports (SGLang), else ``engine.version``, else ``"external"``.
"""

from __future__ import annotations

import json
import urllib.request
from typing import ClassVar
from urllib.parse import urlparse

from grid.engines.base import Engine, EngineUnavailable, LaunchPlan, register
from grid.sweep.space import TrialPlan


@register
class OpenAIEngine(Engine):
    kind = "openai"
    external: ClassVar[bool] = True

    def _url(self) -> str:
        url = getattr(self.spec.engine, "base_url", None)
        if not url:
            raise EngineUnavailable("engine=openai needs engine.base_url=http://HOST:PORT of a running server")
        return str(url).rstrip("/")

    def version(self) -> str:
        if self.spec.engine.version:
            return self.spec.engine.version
        try:
            req = urllib.request.Request(self._url() + "/server_info")
            if self.spec.engine.api_key:
                req.add_header("Authorization", f"Bearer {self.spec.engine.api_key}")
            with urllib.request.urlopen(req, timeout=5) as resp:
                return str(json.loads(resp.read()).get("version") or "external")
        except (OSError, ValueError):
            return "external"

    def check_runnable(self) -> None:
        url = urlparse(self._url())
        if url.scheme not in ("http", "https") or not url.hostname:
            raise EngineUnavailable(f"engine.base_url={self._url()!r}: expected http://HOST:PORT")

    def launch_plan(self, trial: TrialPlan, port: int) -> LaunchPlan:
        url = urlparse(self._url())
        return LaunchPlan([], {}, url.hostname or "127.0.0.1", url.port or port, 1.0, 1.0)

    def server(self):
        """The ServerSession stand-in the trial uses instead of the node's actor."""
        from grid.server.external import ExternalServer

        return ExternalServer(self._url(), self.spec.engine.api_key, self.spec.engine.startup_timeout_s)
