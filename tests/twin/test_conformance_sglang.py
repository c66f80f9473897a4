"""The twin checked against the released SGLang server of the same release: one sequence of requests to both.

Runs with the real_sglang marker when ``GRID_SGLANG_PYTHON`` / ``GRID_SGLANG_MODEL`` name a released SGLang and the
tiny model built with it (experiments/real_server/setup_sglang_cpu.sh); skips otherwise. Real SGLang serves the tiny
Llama on the CPU (``--device cpu``); the twin plays the same release and model on one H100 (it does not model CPUs).

What is compared is what grid relies on (grid/server, grid/loadgen, grid/sweep/samplers.py):

* readiness: the phases ``/health_generate`` goes through (connection refused, then 200; 503 while warming up);
* routes and status codes: health, model and server info, ``/v1/models``, ``/metrics``, a missing route;
* response shapes: the keys of ``/generate`` (``meta_info`` included), ``/v1/completions`` and
  ``/v1/chat/completions``, streamed and not, and how each stream ends;
* the names of the ``/metrics`` families grid reads (grid/server/metrics_scrape.py);
* the scheduler's ``Prefill batch`` / ``Decode batch`` lines: each parses, with the same keys;
* a refused flag (argparse's message and exit status 2) and a refused combination (SGLang's own message);
* a shutdown: SIGTERM ends the whole process group.

The full key paths of every answer are compared too: what differs must be exactly what tests/twin/
sglang_differences.yaml records for the release; why each stays is in docs/twin.md, "The twin against real SGLang"
(with :data:`KNOWN_DIFFERENCES` for the log lines).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from grid.config.specs import HardwareSpec, ModelSpec
from grid.loadgen.records import exceeds_context
from grid.releases.checks import check_config
from grid.releases.devices import launch_args, launch_env
from grid.server.logparse import parse_batch_line
from tests.timing import slack
from tests.real_servers import unavailable

pytestmark = pytest.mark.real_sglang

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 600
TINY = ModelSpec.model_validate({**yaml.safe_load((ROOT / "conf/model/tiny_llama.yaml").read_text()), "path": None})
H100_X1 = HardwareSpec.model_validate(yaml.safe_load((ROOT / "conf/hardware/h100_x1.yaml").read_text()))
#: the differences of shape that stay, per release (key paths; why: docs/twin.md "The twin against real SGLang")
DIFFERENCES = Path(__file__).with_name("sglang_differences.yaml")
#: /metrics families grid's scraper reads (grid/server/metrics_scrape.py), as SGLang names them
METRICS_GRID_READS = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage",
                      "sglang:gen_throughput", "sglang:time_to_first_token_seconds",
                      "sglang:e2e_request_latency_seconds", "sglang:prompt_tokens", "sglang:generation_tokens")

#: Differences between the twin and real SGLang that stay, each with its reason (docs/twin.md, "The twin against real
#: SGLang"). Keyed by what the comparison names.
KNOWN_DIFFERENCES: dict[str, str] = {
    "graph key": "real SGLang on a CPU logs 'cpu graph: B' where a GPU server (and the twin, which plays one) logs "
                 "'cuda graph: B'",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One server process in its own process group, with its log in a file."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, port: int) -> None:
        self.port, self.log_path = port, log
        self.fh = open(log, "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=self.fh, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def status(self, path: str, method: str = "GET", body: dict | None = None, timeout: float = 30.0
               ) -> tuple[int | str, bytes, dict[str, str]]:
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            return r.status, r.read(), {k.lower(): v for k, v in r.getheaders()}
        except ConnectionRefusedError:
            return "refused", b"", {}
        except (OSError, http.client.HTTPException) as err:
            return type(err).__name__, b"", {}
        finally:
            c.close()

    def wait_ready(self) -> list:
        seen: list = []
        limit_s = READY_TIMEOUT_S * slack()
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            st = self.status("/health_generate", timeout=10)[0]
            if not seen or seen[-1] != st:
                seen.append(st)
            if st == 200:
                return seen
            if self.proc.poll() is not None:
                pytest.fail(f"exited with {self.proc.returncode} before ready:\n{self.log()[-3000:]}")
            time.sleep(0.2)
        pytest.fail(f"not ready within {limit_s:.0f} s:\n{self.log()[-3000:]}")

    def stop(self) -> tuple[int | None, float]:
        """SIGTERM the group; (exit status, seconds until the whole group was gone)."""
        t0 = time.monotonic()
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            pass
        while time.monotonic() - t0 < 60 and _group_alive(self.proc.pid):
            time.sleep(0.1)
        took = time.monotonic() - t0
        if _group_alive(self.proc.pid):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.fh.close()
        return self.proc.returncode, took


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    out = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True).stdout.split("\n")
    return any(line.split()[0] == str(pgid) and not line.split()[1].startswith("Z") for line in out if line.strip())


def _setup() -> tuple[str, str, str]:
    python, model = os.environ.get("GRID_SGLANG_PYTHON"), os.environ.get("GRID_SGLANG_MODEL")
    if not python or not model or not Path(python).exists() or not Path(model).exists():
        unavailable("GRID_SGLANG_PYTHON / GRID_SGLANG_MODEL are not set or do not exist: run "
                    "experiments/real_server/setup_sglang_cpu.sh and export the lines it prints")
    version = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('sglang'))"],
                             capture_output=True, text=True, timeout=120, check=True).stdout.strip()
    return python, model, version


def _real_env(version: str) -> dict[str, str]:
    lib = os.environ.get("GRID_SGLANG_LD_LIBRARY_PATH", "")
    env = {**launch_env("cpu"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return {**env, "LD_LIBRARY_PATH": lib} if lib else env


COMMON = ["--host", "127.0.0.1", "--enable-metrics", "--max-total-tokens", "65536", "--decode-log-interval", "10",
          "--served-model-name", "tiny"]


def _start(kind: str, tmp: Path, python: str, model: str, version: str, extra: list[str] = ()) -> Server:
    port = _free_port()
    if kind == "sglang":
        argv = [python, "-m", "sglang.launch_server", "--model-path", model, *launch_args("cpu")]
        env = _real_env(version)
    else:
        mdir = tmp / "twin-model"
        mdir.mkdir(exist_ok=True)
        (mdir / "config.json").write_text(json.dumps(TINY.to_hf_config()))
        argv = [sys.executable, "-m", "grid.twin", "--model-path", str(mdir)]
        env = {"GRID_TWIN_HARDWARE": H100_X1.model_dump_json(), "GRID_TWIN_VERSION": version,
               "GRID_TWIN_TIME_SCALE": "1"}
    return Server([*argv, *COMMON, "--port", str(port), *extra], env, tmp / f"{kind}-{port}.log", port)


def _sse(raw: bytes) -> list:
    out = []
    for block in raw.decode("utf-8", "replace").split("\n\n"):
        block = block.strip()
        if block.startswith("data: "):
            data = block[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def _shape(obj) -> object:
    """The keys of a JSON object, recursively for nested objects and the first item of lists (values dropped)."""
    if isinstance(obj, dict):
        return {k: _shape(v) for k, v in sorted(obj.items())}
    if isinstance(obj, list):
        return [_shape(obj[0])] if obj and isinstance(obj[0], (dict, list)) else []
    return None


def _keys(obj: dict) -> set[str]:
    return set(obj)


def paths(shape, prefix: str = "") -> set[str]:
    """The dotted key paths of a :func:`_shape` (``meta_info.finish_reason.type``; a list's items as ``[]``)."""
    out: set[str] = set()
    if isinstance(shape, dict):
        for k, v in shape.items():
            out |= {f"{prefix}{k}"} | paths(v, f"{prefix}{k}.")
    elif isinstance(shape, list) and shape:
        out |= paths(shape[0], f"{prefix}[].")
    return out


def shapes(server: Server) -> dict[str, set[str]]:
    """The key paths of every answer grid reads, by request: bodies, the first, a middle and the usage event of each
    stream, /v1/models, /model_info, and the ``sglang:`` metric families of /metrics."""
    out: dict[str, set[str]] = {}
    gen = {"text": "the city of", "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}
    out["/generate"] = paths(_shape(json.loads(server.status("/generate", "POST", gen)[1])))
    events = _sse(server.status("/generate", "POST", {**gen, "stream": True})[1])
    out["/generate stream event"] = paths(_shape(events[0]))
    comp = {"model": "tiny", "prompt": "the city of", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    out["/v1/completions"] = paths(_shape(json.loads(server.status("/v1/completions", "POST", comp)[1])))
    events = _sse(server.status("/v1/completions", "POST",
                                {**comp, "stream": True, "stream_options": {"include_usage": True}})[1])
    out["/v1/completions stream event"] = paths(_shape(events[0]))
    out["/v1/completions usage event"] = paths(_shape(events[-2]))
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "the city of"}], "max_tokens": 8,
            "temperature": 0, "ignore_eos": True}
    out["/v1/chat/completions"] = paths(_shape(json.loads(server.status("/v1/chat/completions", "POST", chat)[1])))
    events = _sse(server.status("/v1/chat/completions", "POST",
                                {**chat, "stream": True, "stream_options": {"include_usage": True}})[1])
    out["/v1/chat/completions first event"] = paths(_shape(events[0]))
    out["/v1/chat/completions next event"] = paths(_shape(events[1]))
    out["/v1/chat/completions usage event"] = paths(_shape(events[-2]))
    out["/v1/models"] = paths(_shape(json.loads(server.status("/v1/models")[1])))
    out["/model_info"] = paths(_shape(json.loads(server.status("/model_info")[1])))
    text = server.status("/metrics")[1].decode()
    out["/metrics families"] = {ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE sglang:")}
    return out


def observe(server: Server) -> dict:
    """What grid relies on, as this server answers it."""
    out: dict = {"phases": server.wait_ready()}
    for path in ("/health", "/health_generate", "/model_info", "/server_info", "/get_server_info", "/v1/models",
                 "/metrics", "/no_such_route"):
        out[f"GET {path}"] = server.status(path)[0]
    out["health body"] = server.status("/health")[1]
    out["model_info keys"] = {"model_path", "is_generation"} & _keys(json.loads(server.status("/model_info")[1]))
    info = json.loads(server.status("/server_info")[1])
    out["server_info has"] = {k for k in ("version", "max_total_num_tokens", "internal_states", "tp_size",
                                          "schedule_policy", "chunked_prefill_size") if k in info}
    out["server_info version"] = info.get("version")
    models = json.loads(server.status("/v1/models")[1])
    out["v1/models"] = (models.get("object"), [m.get("id") for m in models.get("data", [])],
                        _keys(models["data"][0]) >= {"id", "object", "owned_by"})
    gen = {"text": "the city of", "sampling_params": {"max_new_tokens": 8, "temperature": 0, "ignore_eos": True}}
    status, raw, _ = server.status("/generate", "POST", gen)
    body = json.loads(raw)
    out["generate"] = (status, _keys(body) >= {"text", "meta_info"},
                       {"prompt_tokens", "completion_tokens", "finish_reason", "id"} - _keys(body["meta_info"]),
                       body["meta_info"]["completion_tokens"])
    status, raw, headers = server.status("/generate", "POST", {**gen, "stream": True})
    events = _sse(raw)
    out["generate stream"] = (status, headers.get("content-type", "").split(";")[0], events[-1],
                              all(isinstance(e, dict) and "text" in e and "meta_info" in e for e in events[:-1]),
                              events[-2]["meta_info"]["completion_tokens"])
    comp = {"model": "tiny", "prompt": "the city of", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    status, raw, _ = server.status("/v1/completions", "POST", comp)
    body = json.loads(raw)
    out["completions"] = (status, body.get("object"), _keys(body["choices"][0]) >= {"text", "finish_reason"},
                          {k: body["usage"][k] for k in ("prompt_tokens", "completion_tokens")})
    status, raw, _ = server.status("/v1/completions", "POST",
                                   {**comp, "stream": True, "stream_options": {"include_usage": True}})
    events = _sse(raw)
    out["completions stream"] = (status, events[-1], events[-2]["usage"]["completion_tokens"],
                                 sum(len(e["choices"]) for e in events[:-1] if isinstance(e, dict)) > 0)
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "the city of"}], "max_tokens": 8,
            "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    status, raw, _ = server.status("/v1/chat/completions", "POST", chat)
    events = _sse(raw)
    out["chat stream"] = (status, events[-1], events[0]["object"], "delta" in events[0]["choices"][0],
                          events[-2]["usage"]["completion_tokens"])
    # a request over the served context (2048 tokens): refused with words grid reads as context_exceeded
    # (grid/loadgen/records.py CONTEXT_EXCEEDED), and /v1/models says the limit grid refuses such a workload by
    over = {"model": "tiny", "prompt": "the city " * 800, "max_tokens": 1000, "temperature": 0}
    status, raw, _ = server.status("/v1/completions", "POST", over)
    out["over context"] = (status, exceeds_context(raw.decode("utf-8", "replace")))
    out["v1/models max_model_len"] = models["data"][0].get("max_model_len")
    out["shapes"] = shapes(server)
    metrics = server.status("/metrics")[1].decode()
    out["metrics grid reads"] = {m for m in METRICS_GRID_READS if f"\n{m}" in "\n" + metrics
                                 or f"# TYPE {m}" in metrics}
    time.sleep(1.0)  # the last Decode line reaches the log
    lines = [parse_batch_line(ln) for ln in server.log().splitlines()]
    batch = [ln for ln in lines if ln is not None]
    out["log kinds"] = {ln["kind"] for ln in batch}
    graph = {"cuda_graph", "cpu_graph"}
    out["log keys"] = {kind: frozenset(set(ln) - graph - {"ts", "prefix", "kind"})
                       for kind in ("prefill", "decode") for ln in batch if ln["kind"] == kind}
    out["graph key"] = {k for ln in batch for k in graph & set(ln)}
    out["stop"] = server.stop()
    return out


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    python, model, version = _setup()
    tmp = tmp_path_factory.mktemp("conformance")
    got = {}
    for kind in ("twin", "sglang"):
        got[kind] = observe(_start(kind, tmp, python, model, version))
    return got, version, (python, model, tmp)


COMPARED = ("phases", "GET /health", "GET /health_generate", "GET /model_info", "GET /server_info",
            "GET /get_server_info", "GET /v1/models", "GET /metrics", "GET /no_such_route", "health body",
            "model_info keys", "server_info has", "server_info version", "v1/models", "generate", "generate stream",
            "completions", "completions stream", "chat stream", "over context", "v1/models max_model_len",
            "metrics grid reads", "log kinds", "log keys")


@pytest.mark.parametrize("what", COMPARED)
def test_the_twin_answers_as_real_sglang(observed, what):
    got, version, _ = observed
    twin, real = got["twin"][what], got["sglang"][what]
    if what == "phases":  # the twin starts in well under a second: it may be ready at the first poll
        assert real[-1] == twin[-1] == 200 and set(twin) <= set(real) | {"refused"}, (twin, real)
        return
    if what == "completions":  # token counts are the model's own (random weights vs the twin's text)
        twin, real = twin[:3], real[:3]
    assert twin == real, f"{what}: twin {twin!r} != SGLang {version} {real!r}"


def test_the_known_differences_are_the_only_ones(observed):
    got, version, _ = observed
    assert got["twin"]["graph key"] == {"cuda_graph"} and got["sglang"]["graph key"] == {"cpu_graph"}, \
        KNOWN_DIFFERENCES["graph key"]
    recorded = yaml.safe_load(DIFFERENCES.read_text())
    if version not in recorded:
        unavailable(f"no differences recorded for SGLang {version} in {DIFFERENCES.name} (recorded: "
                    f"{', '.join(recorded)}); the lists this run found are in the other tests' output")
    found = {}
    for what, real in got["sglang"]["shapes"].items():
        twin = got["twin"]["shapes"][what]
        diff = {k: sorted(v) for k, v in (("real_only", real - twin), ("twin_only", twin - real)) if v}
        if diff:
            found[what] = diff
    assert found == recorded[version], yaml.safe_dump({version: found}, sort_keys=False, width=120)


def test_shutdown_ends_the_group(observed):
    got, _, _ = observed
    for kind in ("twin", "sglang"):
        code, took = got[kind]["stop"]
        assert took < 30 * slack(), f"{kind}: the process group outlived SIGTERM by {took:.1f} s"


@pytest.mark.parametrize("extra, words", [
    (["--schedule-policy", "bogus"], "argument --schedule-policy: invalid choice: 'bogus'"),
    (["--enable-priority-scheduling", "--schedule-policy", "lpm"],
     "To use priority scheduling, schedule_policy must be 'fcfs' or 'lof'. 'lpm' is not supported."),
    # launch rules of grid/releases/checks.py, in the words grid's pre-launch check gives for the release under test
    (["--enable-dp-lm-head", "--dp-size", "2"], {"enable_dp_lm_head": True, "dp_size": 2}),
    (["--served-model-name", "tiny:v1"], {"served_model_name": "tiny:v1"}),
    # PD role switching's exclusions (0.5.21+; before, the flag itself is unknown): SGLang refuses them at argument
    # handling, before any prefill-decode machinery, so a CPU server shows them
    (["--disaggregation-mode", "decode", "--enable-pd-role-switch", "--pp-size", "2", "--disable-overlap-schedule"],
     {"disaggregation_mode": "decode", "enable_pd_role_switch": True, "pp_size": 2, "disable_overlap_schedule": True}),
])
def test_a_refused_flag_is_refused_in_the_same_words(observed, extra, words):
    _, version, (python, model, tmp) = observed
    if isinstance(words, dict):
        (words,) = check_config(words, version)
        words = re.sub(r" \(SGLang [0-9.a-z]+\)$", "", words)  # grid names the release; argparse does not
    codes = {}
    for kind in ("twin", "sglang"):
        server = _start(kind, tmp, python, model, version, extra)
        try:
            server.proc.wait(300)
        except subprocess.TimeoutExpired:
            server.stop()
            pytest.fail(f"{kind} did not refuse {extra}")
        log = server.log()
        server.fh.close()
        assert words in log, f"{kind}: {log[-2000:]}"
        codes[kind] = server.proc.returncode
    assert codes["twin"] == codes["sglang"] or (codes["sglang"] != 0 and codes["twin"] != 0), codes


def test_a_request_over_the_context_is_refused_in_words_grid_reads(observed):
    """Real SGLang (tokenizer_manager) answers HTTP 400 to input + max_tokens over its 2048-token context, in words
    grid classifies as context_exceeded, and /v1/models reports the 2048 grid refuses such a workload by."""
    got, _, _ = observed
    assert got["sglang"]["over context"] == (400, True)
    assert got["sglang"]["v1/models max_model_len"] == 2048


def test_sglang_bench_serving_runs_against_the_twin_on_the_virtual_clock(tmp_path):
    """A client that knows nothing of grid's clock (the released SGLang's own ``sglang.bench_serving``) gets a
    working server from a twin on the virtual clock: every request of a closed loop answered. Its timings are not the
    twin's modelled ones (it reads the wall clock, and the twin serves such requests without sleeping)."""
    python, model, version = _setup()
    mdir = tmp_path / "twin-model"
    mdir.mkdir()
    (mdir / "config.json").write_text(json.dumps(TINY.to_hf_config()))
    port = _free_port()
    twin = Server([sys.executable, "-m", "grid.twin", "--model-path", str(mdir), "--port", str(port),
                   "--served-model-name", "tiny"],
                  {"GRID_TWIN_HARDWARE": H100_X1.model_dump_json(), "GRID_TWIN_VERSION": version,
                   "GRID_TWIN_TIME_SCALE": "1", "GRID_TWIN_CLOCK": "virtual"}, tmp_path / "twin.log", port)
    try:
        twin.wait_ready()
        out = subprocess.run(
            [python, "-m", "sglang.bench_serving", "--backend", "sglang", "--host", "127.0.0.1", "--port", str(port),
             "--dataset-name", "random-ids", "--num-prompts", "16", "--max-concurrency", "4",
             "--random-input-len", "64", "--random-output-len", "16", "--tokenizer", model, "--model", "tiny"],
            capture_output=True, text=True, timeout=300 * slack(), env={**os.environ, **_real_env(version)},
            cwd=tmp_path)  # bench_serving writes its results file (sglang_MMDD_*.jsonl) into the working directory
    finally:
        twin.stop()
    assert out.returncode == 0, out.stderr[-2000:]
    assert re.search(r"Successful requests:\s+16\b", out.stdout), out.stdout[-2000:]
