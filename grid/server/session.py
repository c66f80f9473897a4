"""A node's server session: launch one configuration, check it is ready and sane, report on it, stop it.

This is everything the Ray server actor does, without Ray, so it runs and tests on its own. One session owns at
most one server process at a time; ``launch`` stops the previous one first.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

from grid.server.probe import probe
from grid.server.process import ManagedServer, StartupError, free_port, port_is_free


@dataclass
class LaunchResult:
    """Outcome of launch + readiness + correctness probe (plain data: it crosses Ray)."""

    status: str                      # ok | failed | invalid
    error_class: str | None = None   # startup_exit | startup_oom | startup_timeout | garbage_output | nan_output ...
    message: str = ""
    port: int = 0
    base_url: str = ""
    startup_s: float | None = None   # modelled seconds launch -> ready
    port_open_s: float | None = None
    phases: list[str] = field(default_factory=list)
    exit_code: int | None = None
    log_tail: str = ""
    probe_answers: list[str] = field(default_factory=list)
    infra_retries: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


class ServerSession:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.server: ManagedServer | None = None
        self.label = "idle"

    def pick_port(self, preferred: int = 0) -> tuple[int, list[str]]:
        """``preferred`` if free, else a free port; the second item notes an occupied preferred port."""
        notes: list[str] = []
        if preferred:
            if port_is_free(self.host, preferred):
                return preferred, notes
            notes.append(f"port_in_use: {preferred} held by another process; used a free port")
        return free_port(self.host), notes

    def launch(self, argv: list[str], env: dict[str, str], port: int, log_path: str, time_scale: float,
               startup_timeout_s: float, api: str, model: str, api_key: str | None, label: str = "",
               startup_time_scale: float | None = None) -> dict:
        """Start the server, wait for readiness, run the correctness probe. Returns ``LaunchResult.to_dict()``.

        ``startup_time_scale`` converts real seconds to modelled ones until ready (default ``time_scale``).
        """
        self.stop()
        self.label = label or "server"
        self.server = ManagedServer(argv, env, log_path, self.host, port, startup_time_scale or time_scale)
        base_url = f"http://{self.server.host}:{port}"
        try:
            self.server.start()
            ready = self.server.wait_ready(startup_timeout_s)
        except StartupError as err:
            code = self.server.exit_code()
            self.stop()
            return LaunchResult("failed", err.error_class, str(err), port, base_url, exit_code=code,
                                log_tail=err.log_tail or self.server.log_tail()).to_dict()
        verdict = probe(base_url, api, model, api_key, self.server.log_tail, timeout_s=max(30.0, 600 / time_scale))
        status = "ok" if verdict.ok else ("failed" if verdict.error_class == "probe_error" else "invalid")
        result = LaunchResult(status, verdict.error_class, verdict.detail, port, base_url, ready.startup_s,
                              ready.port_open_s, ready.phases, None, "" if verdict.ok else self.server.log_tail(),
                              verdict.answers)
        return result.to_dict()

    def alive(self) -> bool:
        return self.server is not None and self.server.alive()

    def exit_code(self) -> int | None:
        return None if self.server is None else self.server.exit_code()

    def log_tail(self, max_bytes: int = 8000) -> str:
        return "" if self.server is None else self.server.log_tail(max_bytes)

    def log_size(self) -> int:
        if self.server is None:
            return 0
        try:
            return Path(self.server.log_path).stat().st_size
        except OSError:
            return 0

    def read_log(self, start: int, end: int | None = None) -> str:
        if self.server is None:
            return ""
        with open(self.server.log_path, "rb") as f:
            f.seek(start)
            data = f.read() if end is None else f.read(max(0, end - start))
        return data.decode("utf-8", "replace")

    def server_info(self, api_key: str | None = None) -> dict | None:
        if self.server is None:
            return None
        req = urllib.request.Request(f"http://{self.server.host}:{self.server.port}/server_info")
        if api_key:
            req.add_header("Authorization", f"Bearer {api_key}")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read())
        except (OSError, ValueError):
            return None

    def stop(self, grace_s: float = 10.0) -> None:
        if self.server is not None:
            self.server.stop(grace_s)
        self.label = "idle"
