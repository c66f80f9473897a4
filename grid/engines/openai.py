"""``engine=openai``: benchmark a server that is already running at ``engine.base_url`` (any OpenAI-compatible
engine, or an SGLang server with its native /generate). Nothing is launched or stopped: the trial measures it through
grid/server/external.py, with the same load points, Parquet tables and report as a launched server.

The server's own settings are whatever it was started with; the sweep's settings only label the trial. Its version
is the one /server_info reports (SGLang), else ``engine.version``, else ``"external"``.
"""

from __future__ import annotations

import json
import socket
import urllib.request
from typing import ClassVar
from urllib.parse import urlparse

from grid.engines.base import Engine, EngineUnavailable, LaunchPlan, register
from grid.sweep.space import TrialPlan
from grid.server.net import urlopen


CONNECT_CHECK_S = 5.0  # real seconds the pre-flight TCP connect to engine.base_url may take


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
            with urlopen(req, timeout=5) as resp:
                return str(json.loads(resp.read()).get("version") or "external")
        except (OSError, ValueError):
            return "external"

    def check_runnable(self) -> None:
        """Raises ``EngineUnavailable`` for a malformed URL, and when nothing listens at its host and port (the
        connection is refused or times out within ``CONNECT_CHECK_S``): every configuration would otherwise wait
        ``engine.startup_timeout_s`` for it in turn."""
        url = urlparse(self._url())
        if url.scheme not in ("http", "https") or not url.hostname:
            raise EngineUnavailable(f"engine.base_url={self._url()!r}: expected http://HOST:PORT")
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            socket.create_connection((url.hostname, port), timeout=CONNECT_CHECK_S).close()
        except OSError as err:
            raise EngineUnavailable(
                f"engine.base_url={self._url()}: nothing answers at {url.hostname}:{port} ({err}); start the server "
                "first (grid measures it as it runs), or use engine=sim / engine=sglang to have grid launch one"
            ) from None

    def launch_plan(self, trial: TrialPlan, port: int) -> LaunchPlan:
        url = urlparse(self._url())
        return LaunchPlan([], {}, url.hostname or "127.0.0.1", url.port or port, 1.0, 1.0)

    def server(self):
        """The ServerSession stand-in the trial uses instead of the node's actor."""
        from grid.server.external import ExternalServer

        return ExternalServer(self._url(), self.spec.engine.api_key, self.spec.engine.startup_timeout_s)
