"""A server that is already running (engine=openai, or an SGLang server someone else started): nothing to launch.

``ExternalServer`` is a ServerHandle (grid/server/handle.py) so a trial measures it exactly as it
measures a server it launched: ``launch()`` only waits for readiness and runs the correctness probe, ``stop()`` does
nothing (the server is not ours), ``alive()`` asks the server. There is no process, so no exit code and no log.

``discover()`` reads what the server says about itself: the models it serves (``GET /v1/models``: ``id``, the
``root`` path it loaded, ``max_model_len``, ``owned_by``), its engine and version (SGLang's ``/server_info`` or
``/get_server_info`` ``version``; vLLM's ``GET /version`` -> ``{"version": ...}``). Every failure message carries
the server's own error body.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from grid.server.handle import LaunchRequest, LaunchResult
from grid.server.probe import probe
from grid.server.net import urlopen
from grid.server.statuses import TrialStatus, status_of
from grid.versions import SGLANG, ServerIdentity

#: Readiness endpoints tried in order: SGLang's /health (200 once warm-up is done; SGLang
#: srt/entrypoints/http_server.py), then the OpenAI-compatible model list every such server serves. The model list
#: counts only where the server has no /health (404 or 405) or /health cannot be reached as a route: a /health that
#: answers 5xx (SGLang or vLLM still loading answers 503 while /v1/models already answers 200) means not ready
#: (:meth:`ExternalServer.ready`).
READY_PATHS = ("/health", "/v1/models")
#: The /health answers that mean the server has no such route, so that /v1/models decides readiness.
HEALTH_ABSENT = (404, 405)
POLL_S = 0.5
#: SGLang's server-info routes (``/get_server_info`` in every release grid knows, ``/server_info`` added later).
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")
#: vLLM's version route (vllm/entrypoints/openai/api_server.py: ``GET /version`` -> ``{"version": ...}``).
VERSION_PATH = "/version"


def _get(url: str, api_key: str | None, timeout_s: float) -> tuple[int, bytes]:
    """(HTTP status, body); an HTTP error status returns its error body. Raises ``OSError`` when nothing answers."""
    req = urllib.request.Request(url)
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        try:
            return err.code, err.read() or b""
        except (OSError, ValueError):
            return err.code, b""


def _get_json(url: str, api_key: str | None, timeout_s: float) -> dict[str, Any] | None:
    """The JSON object at ``url`` when it answers 200 with one, else None. Never raises."""
    try:
        status, body = _get(url, api_key, timeout_s)
        obj = json.loads(body) if status == 200 else None
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


@dataclass(frozen=True)
class ServedModel:
    """One entry of ``/v1/models``: the name requests must use (``id``), the path or HF id the server loaded
    (``root``; vLLM and SGLang report it), its context length and owner (``vllm``, ``sglang``, ...)."""

    id: str
    root: str | None = None
    max_model_len: int | None = None
    owned_by: str | None = None


@dataclass(frozen=True)
class ServerFacts:
    """What an external server says about itself. ``engine``: ``sglang`` (it serves /server_info), else the models'
    ``owned_by`` (``vllm``), else ``""``. ``version``: the engine's release, None when it does not say.
    ``error``: why ``/v1/models`` could not be read ("" when it was)."""

    models: tuple[ServedModel, ...] = ()
    engine: str = ""
    version: str | None = None
    error: str = ""

    @property
    def identity(self) -> ServerIdentity:
        """The server's engine family and release, typed (``engine_version`` is its ``label``)."""
        return ServerIdentity(self.engine, self.version)


def parse_models(obj: dict[str, Any]) -> tuple[ServedModel, ...]:
    """The ``data`` list of an OpenAI ``/v1/models`` body. Raises ``ValueError`` for another shape. Pure."""
    data = obj.get("data")
    if not isinstance(data, list):
        raise ValueError(f"/v1/models: no 'data' list in {json.dumps(obj)[:200]}")
    out = []
    for entry in data:
        if isinstance(entry, dict) and entry.get("id"):
            length = entry.get("max_model_len")
            out.append(ServedModel(str(entry["id"]), str(entry["root"]) if entry.get("root") else None,
                                   int(length) if isinstance(length, (int, float)) else None,
                                   str(entry["owned_by"]) if entry.get("owned_by") else None))
    return tuple(out)


def discover(base_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> ServerFacts:
    """Read ``/v1/models``, SGLang's server info and vLLM's ``/version`` from ``base_url``. Never raises: a server
    that does not answer gives ``ServerFacts(error=...)`` with the reason (its error body included)."""
    base = base_url.rstrip("/")
    models: tuple[ServedModel, ...] = ()
    error = ""
    try:
        status, body = _get(base + "/v1/models", api_key, timeout_s)
        if status == 200:
            models = parse_models(json.loads(body))
            if not models:
                error = "/v1/models lists no model"
        else:
            text = body.decode("utf-8", "replace").strip()[:300]
            error = f"/v1/models answered HTTP {status}" + (f": {text}" if text else "")
    except (OSError, ValueError) as err:
        error = f"/v1/models: {err}"
    version, engine = None, ""
    for path in SERVER_INFO_PATHS:
        info = _get_json(base + path, api_key, timeout_s)
        if info is not None and info.get("version"):
            version, engine = str(info["version"]), SGLANG
            break
    if version is None:
        info = _get_json(base + VERSION_PATH, api_key, timeout_s)
        if info is not None and info.get("version"):
            version = str(info["version"])
        engine = next((m.owned_by for m in models if m.owned_by), "") or ""
    return ServerFacts(models, engine, version, error)


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
        self.last_answer = ""  # what the readiness paths last answered (status and error body), for messages
        self.starting = ""  # the last /health 5xx answer (status and body) when that made the server not ready

    def pick_port(self, preferred: int = 0) -> tuple[int, list[str]]:
        return self.port, []

    def ready(self, timeout_s: float = 5.0) -> str | None:
        """The readiness path that answered 200, or None. ``/health`` decides when the server has it: 200 is ready,
        any 5xx (503 while the model loads) means still starting, so not ready, whatever ``/v1/models`` answers
        (``self.starting`` then holds that answer); any other status is not ready either. ``/v1/models`` is asked only
        when ``/health`` is absent (404, 405) or cannot be reached as a route (no HTTP answer)."""
        answers = []
        self.starting = ""
        for path in READY_PATHS:
            try:
                status, body = _get(self.base_url + path, self.api_key, timeout_s)
            except (OSError, ValueError) as err:
                answers.append(f"{path}: {err}")
                continue
            if status == 200:
                return path
            text = body.decode("utf-8", "replace").strip()[:300]
            answer = f"{path}: HTTP {status}" + (f" {text}" if text else "")
            answers.append(answer)
            if path == READY_PATHS[0] and status not in HEALTH_ABSENT:
                if status >= 500:
                    self.starting = answer
                break
        self.last_answer = "; ".join(answers)
        return None

    def launch(self, request: LaunchRequest) -> LaunchResult:
        """Wait (up to ``ready_timeout_s`` real seconds) for the server to answer, then run the correctness probe
        (unless ``request.probe_enabled`` is False). ``argv``/``env``/``log_path``/``port`` of the request are
        ignored: nothing is started."""
        self.label = request.label or "external"
        key = request.api_key if request.api_key is not None else self.api_key
        self.api_key = key
        t0 = time.perf_counter()
        deadline = t0 + self.ready_timeout_s
        path = self.ready()
        while path is None and time.perf_counter() < deadline:
            time.sleep(POLL_S)
            path = self.ready()
        if path is None:
            message = (f"{self.base_url} was still starting when the {self.ready_timeout_s:.0f} s wait ended: "
                       f"{self.starting} (a 5xx from /health means not ready, whatever /v1/models answers)"
                       if self.starting else
                       f"{self.base_url} did not answer {' or '.join(READY_PATHS)} with 200 within "
                       f"{self.ready_timeout_s:.0f} s (last answers: {self.last_answer})")
            return LaunchResult(status_of("external_unreachable"), "external_unreachable", message, self.port,
                                self.base_url)
        verdict = probe(self.base_url, request.api, request.model, key, lambda: "",
                        timeout_s=max(30.0, 600 / request.time_scale), enabled=request.probe_enabled)
        status: TrialStatus = "ok" if verdict.ok else status_of(verdict.error_class)
        return LaunchResult(status, verdict.error_class, verdict.detail, self.port, self.base_url,
                            startup_s=None, phases=[f"ready: {path}"], probe_answers=verdict.answers,
                            probe_status=verdict.status)

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

    def server_info(self, api_key: str | None = None) -> dict[str, Any] | None:
        """SGLang's /server_info when the server has it (None for other engines)."""
        for path in SERVER_INFO_PATHS:
            try:
                status, body = _get(self.base_url + path, api_key or self.api_key, 10.0)
                if status == 200:
                    info = json.loads(body)
                    if isinstance(info, dict):
                        return info
            except (OSError, ValueError):
                continue
        return None

    def stop(self, grace_s: float = 10.0) -> str | None:
        """Nothing: the server is not grid's to stop."""
        self.label = "idle"
        return None
