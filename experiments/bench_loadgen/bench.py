"""Side-by-side benchmark of streaming load generators against a ground-truth server.

Clients: grid's load generator, guidellm, aiperf, SGLang 0.5.9 bench_serving (run as a file from the unpacked wheel).
Server: ``gt_server.c`` (C, epoll + timerfd, one thread, SCHED_FIFO when allowed): writes token i of every request at
``recv + TTFT + i * ITL`` and logs when each write() returned (CLOCK_MONOTONIC), so every client's per-request TTFT and
ITL can be compared with what the server actually did.

    python experiments/bench_loadgen/bench.py                    # full run (about 10 minutes on 2 cores, after the first set-up)
    python experiments/bench_loadgen/bench.py --quick            # smoke run (1 repeat, fewer points)
    python experiments/bench_loadgen/bench.py --clients grid,bench_serving --repeats 1

Everything it installs or writes lives under ``.bench/`` (git-ignored): one virtual environment per peer (from the
package index), the sglang wheel (``pip download sglang==0.5.9 --no-deps``; only ``sglang/bench_serving.py`` is
unpacked), a tiny local tokenizer (``make_tokenizer.py``), the compiled server, every run's raw outputs, and
``results.md`` / ``results.json``.

Measures, per client and load point (medians over repeats):
* TTFT error: |client TTFT - (server's first write - server's receipt of the request)|, median and p99 over
  requests (ms). Send-side delay (client stamps its start, bytes reach the server later) and receive-side delay
  both count as client error. Requests are matched to server records by the request id the server echoes as the
  first token's text (``#<id>#``); a client that does not report its output text is matched by order.
* ITL error: |client mean ITL - server mean ITL| per request, with mean ITL = (last token - first token) / (n - 1),
  median and p99 (ms). Every client reports this per request; finer per-token gaps are not reported by all.
* in flight: how many requests the server had open (receipt to last write) in the middle 60 % of the run
  (median over 1 ms samples), against the asked-for concurrency.
* CPU: user+system seconds of the client's whole process tree (a subreaper wrapper reaps every descendant), minus
  the same client's start-up cost (median of three 2-request runs), per 100k streamed tokens.
* sustainable rate: the highest streamed token rate (server side: tokens / (last write - first receipt)) at which
  the client's median ITL error stays under 10 % of the ITL, over a sweep of shorter ITLs at 256 streams.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MIN_TOKENS_FOR_CPU = 10_000  # fewer streamed tokens than this: no CPU-per-100k figure (the 1-stream point)
BASELINE_RUNS = 3  # start-up CPU is the median of this many 2-request runs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CACHE = ROOT / ".bench"
VENVS = CACHE / "venvs"
TOKENIZER = CACHE / "tokenizer"
BS_FILE = CACHE / "bench_serving" / "sglang" / "bench_serving.py"
SERVER_BIN = CACHE / "gt_server"
CLIENTS = ("grid", "guidellm", "aiperf", "bench_serving")
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
PEER_PACKAGES = {
    "guidellm": ["guidellm"],
    "aiperf": ["aiperf"],
    "bench_serving": ["aiohttp", "numpy", "pybase64", "requests", "pillow", "tqdm", "transformers", "datasets",
                      "tokenizers"],
}


# ----------------------------------------------------------------------------------------------------------- setup
def sh(cmd: list[str], **kw) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def vpy(name: str) -> Path:
    return VENVS / name / "bin" / "python"


def setup(clients: list[str]) -> None:
    CACHE.mkdir(exist_ok=True)
    src = HERE / "gt_server.c"
    if not SERVER_BIN.exists() or SERVER_BIN.stat().st_mtime < src.stat().st_mtime:
        sh([os.environ.get("CC", "cc"), "-O2", "-o", SERVER_BIN, src])
    for name in ["bench_serving"] + [c for c in clients if c in PEER_PACKAGES and c != "bench_serving"]:
        marker = VENVS / name / ".installed"
        if marker.exists():
            continue
        sh([sys.executable, "-m", "venv", VENVS / name])
        sh([vpy(name), "-m", "pip", "install", "-q", *PEER_PACKAGES[name]])
        marker.write_text("ok\n")
    if "bench_serving" in clients and not BS_FILE.exists():
        wheels = CACHE / "wheels"
        sh([vpy("bench_serving"), "-m", "pip", "download", "-q", "sglang==0.5.9", "--no-deps", "-d", wheels])
        import zipfile
        whl = next(wheels.glob("sglang-0.5.9-*.whl"))
        with zipfile.ZipFile(whl) as z:
            z.extract("sglang/bench_serving.py", BS_FILE.parent.parent)
    if not (TOKENIZER / "tokenizer.json").exists():
        sh([vpy("bench_serving"), HERE / "make_tokenizer.py", TOKENIZER])


# ------------------------------------------------------------------------------------------- CPU of a process tree
def wrap_main(argv: list[str]) -> None:
    """``bench.py --_wrap OUT -- CMD...``: run CMD as a child subreaper, reap every descendant, write rusage."""
    out, cmd = argv[0], argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphaned grandchildren are re-parented to us
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    rc = None
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid == proc.pid:
            rc = os.waitstatus_to_exitcode(status)
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    Path(out).write_text(json.dumps({"rc": rc, "cpu_s": ru.ru_utime + ru.ru_stime, "wall_s": time.perf_counter() - t0}))


def run_measured(cmd: list[str], outdir: Path, timeout: float, env: dict | None = None) -> dict:
    usage = outdir / "rusage.json"
    full = [sys.executable, str(Path(__file__).resolve()), "--_wrap", str(usage), "--", *[str(c) for c in cmd]]
    with open(outdir / "client.log", "w") as log:
        full_env = {**os.environ, **OFFLINE_ENV, **(env or {})}
        full_env = {k: v for k, v in full_env.items() if v is not None}
        p = subprocess.Popen(full, stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=outdir,
                             start_new_session=True)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            return {"rc": "timeout", "cpu_s": float("nan"), "wall_s": timeout}
    return json.loads(usage.read_text()) if usage.exists() else {"rc": p.returncode, "cpu_s": float("nan")}


# --------------------------------------------------------------------------------------------------------- server
class Server:
    def __init__(self, outdir: Path, ttft_ms: float, itl_ms: float, tokens: int) -> None:
        self.port_file, self.log = outdir / "server.port", outdir / "server.log"
        self.proc = subprocess.Popen([str(SERVER_BIN), str(self.port_file), str(self.log), str(int(ttft_ms * 1000)),
                                      str(int(itl_ms * 1000)), str(tokens)])
        deadline = time.monotonic() + 10
        while not self.port_file.exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("ground-truth server did not start")
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.port_file.read_text()}"

    def stop(self) -> dict[int, tuple[int, list[int]]]:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)
        recs = {}
        for line in self.log.read_text().splitlines():
            v = [int(x) for x in line.split()]
            recs[v[0]] = (v[1], v[3:3 + v[2]])
        return recs


# -------------------------------------------------------------------------------------------------------- clients
@dataclass
class Req:
    """One request as the client reported it: TTFT and mean ITL (ms), and the server id when it can be known."""
    ttft_ms: float
    itl_ms: float | None
    server_id: int | None = None


def _echo_id(text: str | None) -> int | None:
    if text and text.startswith("#"):
        end = text.find("#", 1)
        if end > 1 and text[1:end].isdigit():
            return int(text[1:end])
    return None


def cmd_grid(url: str, conc: int, num: int, tokens: int, out: Path) -> list[str]:
    return [ROOT / ".venv" / "bin" / "python", HERE / "grid_client.py", url, "completions", conc, num, tokens,
            out / "grid.jsonl"]


def parse_grid(out: Path) -> list[Req]:
    reqs = []
    for line in (out / "grid.jsonl").read_text().splitlines():
        r = json.loads(line)
        if not r["ok"]:
            continue
        t, n = r["token_ns"], sum(r["tokens"])
        itl = (t[-1] - t[0]) / 1e6 / (n - 1) if n > 1 else None
        reqs.append(Req((t[0] - r["start_ns"]) / 1e6, itl, _echo_id(r["text"])))
    return reqs


def cmd_bench_serving(url: str, conc: int, num: int, tokens: int, out: Path) -> list[str]:
    return [vpy("bench_serving"), BS_FILE, "--backend", "sglang", "--base-url", url, "--dataset-name", "random-ids",
            "--random-input-len", 16, "--random-output-len", tokens, "--random-range-ratio", 1, "--num-prompts", num,
            "--max-concurrency", conc, "--request-rate", "inf", "--tokenizer", TOKENIZER, "--model", "bench-model",
            "--output-file", out / "bs.jsonl", "--output-details", "--disable-tqdm", "--warmup-requests", 1]


def parse_bench_serving(out: Path) -> list[Req]:
    d = json.loads((out / "bs.jsonl").read_text().splitlines()[-1])
    reqs = []
    for ttft, itls, text, err in zip(d["ttfts"], d["itls"], d["generated_texts"], d["errors"]):
        if err or not ttft:
            continue
        reqs.append(Req(ttft * 1e3, (sum(itls) / len(itls) * 1e3) if itls else None, _echo_id(text)))
    return reqs


def cmd_guidellm(url: str, conc: int, num: int, tokens: int, out: Path) -> list[str]:
    scenario = {"spec": {
        "backend": {"kind": "openai_http", "target": url, "model": "bench-model", "request_format": "/v1/completions"},
        "profile": {"kind": "concurrent", "streams": [conc]},
        "constraints": [{"kind": "max_requests", "count": num}],
        "tokenizer": {"kind": "huggingface_auto", "model": str(TOKENIZER)},
        "data": [{"kind": "synthetic_text", "prompt_tokens": 16, "output_tokens": tokens}],
        "outputs": [{"kind": "json", "path": str(out / "guidellm.json")}],
    }}
    (out / "scenario.json").write_text(json.dumps(scenario))
    return [VENVS / "guidellm" / "bin" / "guidellm", "run", "-c", out / "scenario.json", "--disable-console-interactive"]


def parse_guidellm(out: Path) -> list[Req]:
    d = json.loads((out / "guidellm.json").read_text())
    reqs = []
    for r in d["benchmarks"][0]["requests"]["successful"]:
        reqs.append(Req(r["time_to_first_token_ms"], r.get("inter_token_latency_ms"), _echo_id(r.get("output"))))
    return reqs


def cmd_aiperf(url: str, conc: int, num: int, tokens: int, out: Path) -> list[str]:
    return [VENVS / "aiperf" / "bin" / "aiperf", "profile", "--model", "bench-model", "--tokenizer", TOKENIZER,
            "--url", url, "--endpoint-type", "completions", "--streaming", "--concurrency", conc,
            "--request-count", num, "--isl", 16, "--isl-stddev", 0, "--osl", tokens, "--osl-stddev", 0,
            "--extra-inputs", "ignore_eos:true", "--use-server-token-count", "--artifact-dir", out / "aiperf",
            "--ui-type", "none"]


def parse_aiperf(out: Path) -> list[Req]:
    """Per-request records (default export level). They carry no output text: matched to the server by send order."""
    rows = []
    for line in (out / "aiperf" / "profile_export.jsonl").read_text().splitlines():
        r = json.loads(line)
        m = r["metrics"]
        if "time_to_first_token" not in m:
            continue
        itl = m.get("inter_token_latency", {}).get("value")
        rows.append((r["metadata"]["request_start_ns"], Req(m["time_to_first_token"]["value"], itl)))
    rows.sort(key=lambda x: x[0])
    return [r for _, r in rows]


COMMANDS = {"grid": (cmd_grid, parse_grid), "guidellm": (cmd_guidellm, parse_guidellm),
            "aiperf": (cmd_aiperf, parse_aiperf), "bench_serving": (cmd_bench_serving, parse_bench_serving)}
# aiperf must not see HF_HUB_OFFLINE: in offline mode it treats a local tokenizer path as a hub repo id and fails
CLIENT_ENV = {"aiperf": {"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None}}


# -------------------------------------------------------------------------------------------------------- analysis
def in_flight(server: dict[int, tuple[int, list[int]]]) -> tuple[float, int]:
    """(median requests open over the middle 60 % of the run, peak), from receipt to last write."""
    spans = [(recv, w[-1]) for recv, w in server.values() if w]
    if not spans:
        return float("nan"), 0
    starts = np.sort([s for s, _ in spans])
    ends = np.sort([e for _, e in spans])
    t0, t1 = starts[0], ends[-1]
    grid = np.arange(t0 + 0.2 * (t1 - t0), t0 + 0.8 * (t1 - t0), 1_000_000)
    open_ = np.searchsorted(starts, grid, side="right") - np.searchsorted(ends, grid, side="right")
    allt = np.arange(t0, t1, 1_000_000)
    peak = int((np.searchsorted(starts, allt, side="right") - np.searchsorted(ends, allt, side="right")).max())
    return float(np.median(open_)) if len(open_) else float("nan"), peak


def analyse(reqs: list[Req], server: dict[int, tuple[int, list[int]]]) -> dict:
    order = sorted(server)  # server ids are in receipt order
    by_order = all(r.server_id is None for r in reqs)
    if by_order:  # the client reports no text: pair its requests (in send order) with the server's last ones
        ids = order[len(order) - len(reqs):] if len(reqs) <= len(order) else []
        for r, sid in zip(reqs, ids):
            r.server_id = sid
    ttft_err, itl_err = [], []
    for r in reqs:
        if r.server_id not in server:
            continue
        recv, w = server[r.server_id]
        ttft_err.append(abs(r.ttft_ms - (w[0] - recv) / 1e6))
        if r.itl_ms is not None and len(w) > 1:
            itl_err.append(abs(r.itl_ms - (w[-1] - w[0]) / 1e6 / (len(w) - 1)))
    # load figures over the measured requests only (a client's warm-up requests are left out)
    measured = {r.server_id: server[r.server_id] for r in reqs if r.server_id in server} or server
    tokens = sum(len(w) for _, w in measured.values())
    first = min(recv for recv, _ in measured.values())
    last = max(w[-1] for _, w in measured.values() if w)
    med_if, peak = in_flight(measured)

    def pct(a, q):
        return float(np.percentile(a, q)) if a else float("nan")

    return {"matched": len(ttft_err), "reported": len(reqs), "server_requests": len(server),
            "match": "order" if by_order else "echo",
            "ttft_err_p50_ms": pct(ttft_err, 50), "ttft_err_p99_ms": pct(ttft_err, 99),
            "itl_err_p50_ms": pct(itl_err, 50), "itl_err_p99_ms": pct(itl_err, 99),
            "in_flight_median": med_if, "in_flight_peak": peak, "tokens": tokens,
            "tok_per_s": tokens / ((last - first) / 1e9) if last > first else float("nan")}


# ------------------------------------------------------------------------------------------------------ execution
@dataclass
class Point:
    conc: int
    itl_ms: float
    num: int
    repeats: int
    ttft_ms: float = 100.0
    tokens: int = 50
    label: str = ""


def run_one(client: str, p: Point, outdir: Path, timeout: float) -> dict:
    outdir.mkdir(parents=True, exist_ok=True)
    cmd_fn, parse_fn = COMMANDS[client]
    srv = Server(outdir, p.ttft_ms, p.itl_ms, p.tokens)
    try:
        usage = run_measured(cmd_fn(srv.url, p.conc, p.num, p.tokens, outdir), outdir, timeout,
                             CLIENT_ENV.get(client))
    finally:
        server = srv.stop()
    res: dict = {"rc": usage["rc"], "cpu_s": usage["cpu_s"], "wall_s": usage.get("wall_s")}
    if usage["rc"] != 0:
        res["error"] = f"exit {usage['rc']}; see {outdir / 'client.log'}"
        return res
    try:
        reqs = parse_fn(outdir)
    except Exception as exc:  # report, do not guess
        res["error"] = f"output not readable: {type(exc).__name__}: {exc}"
        return res
    if not server:
        res["error"] = "server saw no finished request"
        return res
    res.update(analyse(reqs, server))
    return res


def median_of(runs: list[dict], key: str) -> float:
    vals = [r[key] for r in runs if key in r and r[key] == r[key]]
    return float(statistics.median(vals)) if vals else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 repeat, 1 and 256 streams, short sweep")
    ap.add_argument("--sweep-itl", default="5,3,2,1.5", help="shorter ITLs (ms) at 256 streams for the rate sweep")
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per client run")
    ap.add_argument("--out", default=str(CACHE / "runs"))
    args = ap.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    for c in clients:
        if c not in COMMANDS:
            ap.error(f"unknown client {c!r}; known: {', '.join(CLIENTS)}")
    setup(clients)
    reps = 1 if args.quick else args.repeats
    points = [Point(1, 10, 12, reps, label="c1"), Point(64, 10, 1024, reps, label="c64"),
              Point(256, 10, 1024, reps, label="c256")]
    if args.quick:
        points = [points[0], points[2]]
    sweep = [Point(256, float(x), 1024, 1, label=f"c256_itl{x}") for x in args.sweep_itl.split(",") if x]
    if args.quick:
        sweep = sweep[:1]
    out = Path(args.out) / time.strftime("%Y%m%d-%H%M%S")
    results: dict = {"points": {}, "baseline_cpu_s": {}, "baseline_runs_cpu_s": {}, "sweep": {}}
    t_start = time.monotonic()
    for client in clients:  # start-up CPU: the median of three 2-request runs
        base = [run_one(client, Point(1, 10, 2, 1), out / client / f"baseline_{k}", args.timeout)
                for k in range(BASELINE_RUNS)]
        results["baseline_cpu_s"][client] = median_of(base, "cpu_s")
        results["baseline_runs_cpu_s"][client] = [b["cpu_s"] for b in base]
        print(f"[{time.monotonic() - t_start:6.0f}s] {client} baseline cpu {results['baseline_cpu_s'][client]:.2f}s "
              f"(runs: {', '.join(format(b['cpu_s'], '.2f') for b in base)}) {base[0].get('error', '')}", flush=True)
    for p in points:
        for rep in range(p.repeats):
            for client in clients:  # interleave clients so slow drifts of the machine hit all alike
                r = run_one(client, p, out / client / f"{p.label}_r{rep}", args.timeout)
                results["points"].setdefault(p.label, {}).setdefault(client, []).append(r)
                print(f"[{time.monotonic() - t_start:6.0f}s] {p.label} rep {rep} {client}: " + _brief(r), flush=True)
    for client in clients:
        ok = True
        for p in sweep:
            if not ok:
                break
            r = run_one(client, p, out / client / p.label, args.timeout)
            results["sweep"].setdefault(client, []).append({"itl_ms": p.itl_ms, **r})
            print(f"[{time.monotonic() - t_start:6.0f}s] {p.label} {client}: " + _brief(r), flush=True)
            ok = "error" not in r and r["itl_err_p50_ms"] < 0.1 * p.itl_ms
    results["meta"] = {"cpus": os.cpu_count(), "repeats": reps, "duration_s": time.monotonic() - t_start,
                       "points": [p.__dict__ for p in points], "sweep": [p.__dict__ for p in sweep]}
    md = report(results, clients, points, sweep)
    (CACHE / "results.json").write_text(json.dumps(results, indent=1, default=str))
    (CACHE / "results.md").write_text(md)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    print(md)
    print(f"raw runs: {out}; tables: {CACHE / 'results.md'}")


def _brief(r: dict) -> str:
    if "error" in r:
        return "ERROR " + r["error"]
    return (f"ttft err p50 {r['ttft_err_p50_ms']:.2f} p99 {r['ttft_err_p99_ms']:.2f} ms, itl err p50 "
            f"{r['itl_err_p50_ms']:.3f} p99 {r['itl_err_p99_ms']:.3f} ms, in flight {r['in_flight_median']:.0f}"
            f"/{r['in_flight_peak']}, cpu {r['cpu_s']:.2f}s, {r['tok_per_s']:.0f} tok/s, matched {r['matched']}"
            f"/{r['server_requests']} ({r['match']})")


def _f(x: float, nd: int = 2) -> str:
    return "n/a" if x != x else f"{x:.{nd}f}"


def report(results: dict, clients: list[str], points: list[Point], sweep: list[Point]) -> str:
    lines = [f"Machine: {os.cpu_count()} CPUs. Medians over {results['meta']['repeats']} repeat(s). Errors are "
             "|client - server| per request, in ms. CPU is net of each client's start-up CPU: " +
             ", ".join(f"{c} {_f(results['baseline_cpu_s'].get(c, float('nan')))} s" for c in clients) +
             f" (median of {BASELINE_RUNS} 2-request runs).", ""]
    for p in points:
        lines += [f"#### {p.conc} stream(s), TTFT {p.ttft_ms:g} ms, ITL {p.itl_ms:g} ms, {p.tokens} tokens, "
                  f"{p.num} requests", "",
                  "| client | TTFT err p50 | TTFT err p99 | ITL err p50 | ITL err p99 | in flight (median / peak) | "
                  "CPU s per 100k tok | matched by |", "|---|---|---|---|---|---|---|---|"]
        for c in clients:
            runs = [r for r in results["points"].get(p.label, {}).get(c, []) if "error" not in r]
            if not runs:
                errs = [r.get("error", "") for r in results["points"].get(p.label, {}).get(c, [])]
                lines.append(f"| {c} | failed: {errs[:1]} | | | | | | |")
                continue
            base = results["baseline_cpu_s"].get(c, float("nan"))
            cpu = median_of([{**r, "net": (r["cpu_s"] - base) / r["tokens"] * 1e5} for r in runs], "net")
            if min(r["tokens"] for r in runs) < MIN_TOKENS_FOR_CPU:
                cpu = float("nan")  # the start-up baseline's noise outweighs so little work: not a measurement
            lines.append(
                f"| {c} | {_f(median_of(runs, 'ttft_err_p50_ms'))} | {_f(median_of(runs, 'ttft_err_p99_ms'))} | "
                f"{_f(median_of(runs, 'itl_err_p50_ms'), 3)} | {_f(median_of(runs, 'itl_err_p99_ms'), 3)} | "
                f"{_f(median_of(runs, 'in_flight_median'), 0)} / {_f(median_of(runs, 'in_flight_peak'), 0)} | "
                f"{_f(cpu)} | {runs[0]['match']} |")
        lines.append("")
    if sweep or results["sweep"]:
        lines += ["#### Highest sustainable streamed token rate (256 streams; median ITL error < 10 % of the ITL)", "",
                  "| client | " + " | ".join(f"ITL {p.itl_ms:g} ms" for p in [points[-1]] + sweep) +
                  " | sustained tok/s |", "|---|" + "---|" * (len(sweep) + 2)]
        for c in clients:
            cells, best = [], float("nan")
            main_runs = [r for r in results["points"].get(points[-1].label, {}).get(c, []) if "error" not in r]
            cand = [(points[-1].itl_ms, {"itl_err_p50_ms": median_of(main_runs, "itl_err_p50_ms"),
                                          "tok_per_s": median_of(main_runs, "tok_per_s")})] if main_runs else []
            cand += [(r["itl_ms"], r) for r in results["sweep"].get(c, []) if "error" not in r]
            seen = {itl: r for itl, r in cand}
            for p in [points[-1]] + sweep:
                r = seen.get(p.itl_ms)
                if r is None:
                    cells.append("not run")
                    continue
                good = r["itl_err_p50_ms"] < 0.1 * p.itl_ms
                cells.append(f"{r['tok_per_s']:.0f} tok/s, err {r['itl_err_p50_ms']:.3f} ms {'ok' if good else 'over'}")
                if good and not (best >= r["tok_per_s"]):
                    best = r["tok_per_s"]
            lines.append(f"| {c} | " + " | ".join(cells) + f" | {_f(best, 0)} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--_wrap":
        wrap_main(sys.argv[2:])
    else:
        main()
