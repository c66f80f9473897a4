"""A server that is already running (engine=openai, or an SGLang server someone else started): nothing to launch.

``ExternalServer`` has the ServerSession interface (grid/server/session.py) so a trial measures it exactly as it
measures a server it launched: ``launch()`` only waits for readiness and runs the correctness probe, ``stop()`` does
nothing (the server is not ours), ``alive()`` asks the server. There is no process, so no exit code and no log.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from urllib.parse import urlparse

from grid.server.probe import probe
from grid.server.session import LaunchResult
from grid.server.net import urlopen

#: Readiness endpoints tried in order: SGLang's /health (200 once warm-up is done, sglang.md §2.1), then the
#: OpenAI-compatible model list every such server serves.
READY_PATHS = ("/health", "/v1/models")
POLL_S = 0.5


def _get(url: str, api_key: str | None, timeout_s: float) -> tuple[int, bytes]:
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, b""


class ExternalServer:
    """Measure the server at ``base_url`` (``http://HOST:PORT``). Raises ``ValueError`` for a URL without a port
    and an http(s) scheme."""

    def __init__(self, base_url: str, api_key: str | None = None, ready_timeout_s: float = 60.0) -> None:
        url = urlparse(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"engine.base_url={base_url!r}: expected http://HOST:PORT")
        self.base_url = base_url.rstrip("/")
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.api_key = api_key
        self.ready_timeout_s = ready_timeout_s
        self.label = "external"

    def pick_port(self, preferred: int = 0) -> tuple[int, list[str]]:
        return self.port, []

    def ready(self, timeout_s: float = 5.0) -> str | None:
        """The readiness path that answered 200, or None."""
        for path in READY_PATHS:
            try:
                status, _ = _get(self.base_url + path, self.api_key, timeout_s)
            except (OSError, ValueError):
                continue
            if status == 200:
                return path
        return None

    def launch(self, argv: list[str] | None = None, env: dict | None = None, port: int = 0, log_path: str = "",
               time_scale: float = 1.0, startup_timeout_s: float = 0.0, api: str = "generate", model: str = "",
               api_key: str | None = None, label: str = "", startup_time_scale: float | None = None,
               **_: object) -> dict:
        """Wait (up to ``ready_timeout_s`` real seconds) for the server to answer, then run the correctness probe.
        ``argv``/``env``/``log_path`` are ignored: nothing is started. Returns ``LaunchResult.to_dict()``."""
        self.label = label or "external"
        key = api_key if api_key is not None else self.api_key
        self.api_key = key
        t0 = time.perf_counter()
        deadline = t0 + self.ready_timeout_s
        path = self.ready()
        while path is None and time.perf_counter() < deadline:
            time.sleep(POLL_S)
            path = self.ready()
        if path is None:
            return LaunchResult("failed", "external_unreachable",
                                f"{self.base_url} did not answer {' or '.join(READY_PATHS)} with 200 within "
                                f"{self.ready_timeout_s:.0f} s", self.port, self.base_url).to_dict()
        verdict = probe(self.base_url, api, model, key, lambda: "", timeout_s=max(30.0, 600 / time_scale))
        status = "ok" if verdict.ok else ("failed" if verdict.error_class == "probe_error" else "invalid")
        return LaunchResult(status, verdict.error_class, verdict.detail, self.port, self.base_url,
                            startup_s=None, phases=[f"ready: {path}"], probe_answers=verdict.answers).to_dict()

    def alive(self) -> bool:
        return self.ready() is not None

    def exit_code(self) -> int | None:
        return None

    def wait_exit(self, timeout_s: float) -> int | None:
        return None

    def log_tail(self, max_bytes: int = 8000) -> str:
        return ""

    def log_size(self) -> int:
        return 0

    def read_log(self, start: int, end: int | None = None) -> str:
        return ""

    def server_info(self, api_key: str | None = None) -> dict | None:
        """SGLang's /server_info when the server has it (None for other engines)."""
        for path in ("/server_info", "/get_server_info"):
            try:
                status, body = _get(self.base_url + path, api_key or self.api_key, 10.0)
                if status == 200:
                    return json.loads(body)
            except (OSError, ValueError):
                continue
        return None

    def stop(self, grace_s: float = 10.0) -> str | None:
        """Nothing: the server is not grid's to stop."""
        self.label = "idle"
        return None
