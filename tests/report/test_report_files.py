"""The report of a recorded sweep (grid.app.report): what was measured, the real launch command, the CUDA-graph
warning, failures by cause, the Pareto fronts, the re-judged SLO table, and report.html opened in a real headless
browser (Debian's chromium + chromium-driver through selenium)."""

import base64
import shutil

import pytest
from rich.console import Console

from tests.sweep.test_measure import spec_for  # noqa: E402

from grid.app import report  # noqa: E402
from grid.sweep.space import expand  # noqa: E402
from report.recorded import record  # noqa: E402

OOM_TAIL = ("[2026-03-01 10:00:00] Load weight begin.\n[2026-03-01 10:00:09] torch.OutOfMemoryError: CUDA out of "
            "memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.11 GiB of which 0 bytes is free.\n")


@pytest.fixture
def recorded_run(tmp_path):
    spec = spec_for(tmp_path, "+sweep=mem_fraction", "~sweep.load", "sweep.grid.mem_fraction_static=[0.8,0.85,0.9,0.95]")
    plans = expand(spec)
    record(tmp_path, plans, [
        {1: (100.0, 10.0, 50.0), 4: (380.0, 12.0, 80.0)},
        {1: (101.0, 9.0, 45.0), 4: (400.0, 11.0, 90.0)},
        {1: (99.0, 9.5, 40.0), 4: (390.0, 13.0, 70.0)},
        ("failed", "startup_oom", "server exited with code 1 before it was ready", OOM_TAIL),
    ])
    console = Console(record=True, width=250)
    verdicts = report(spec, console)
    return spec, plans, verdicts, console.export_text(), tmp_path


def test_report_md_says_what_was_measured_and_why(recorded_run):
    spec, plans, verdicts, out, run_dir = recorded_run
    md = (run_dir / "report.md").read_text()
    assert [v.outcome for v in verdicts] == ["best", "lost", "lost", "failed"]
    assert verdicts[0].label == "mem_fraction_static=0.85"
    measured = md.split("## What was measured\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert measured == [
        "- Model: llama3_1_8b (meta-llama/Llama-3.1-8B-Instruct)",
        "- Hardware: h100_x1: 1 x NVIDIA H100 80GB HBM3 (sm_90, 80 GB each, nvlink)",
        "- Engine: the embedded SGLang twin (modelled performance; no GPU ran); SGLang release 0.5.9 (engine=sim)",
        "- Workload: random prompts, ISL 32 / OSL 16 tokens (fixed); closed loop at concurrency 1, 4; 2 requests per "
        "stream per point (at least 101, enough for p99 not to be the slowest request), after 1 warm-up request",
        "- Closed-loop load: steady state (load.closed_loop_start=staggered, as AIPerf's --steady-state): warm-up, "
        "outside the window: the lone warm-up request(s), then a first wave of one request per stream, stream k of c "
        "asking for (k+1)/c of the output length, so the streams' phases spread over one loaded request time; window: "
        "first measured send to last measured end, every stream busy throughout (tail requests kept the load on, then "
        "were cancelled); throughputs count tokens by arrival inside the window",
        "- Repeats: 1 per load point: the spread is not measured, so scores within the default 1% of the best "
        "count as ties (set load.repeats=3 to measure it); so is a lead smaller than the share of the points' time "
        "the host took (load_points.client_lag_pct)",
        "- Measured windows: 6 closed-loop points measured in steady state, window 30 s, 2-5 warm-up requests per "
        "point before it, 1-4 tail requests per point after the measured ones (modelled time)",
        "- Requests measured per load point: 4",
        "- Time: the twin's virtual clock (engine.clock=virtual): every ms and per-second value is modelled time, "
        "a function of the configuration, the load and its seed, not of the host (README, 'The twin's clock')",
        "- Objective: max_output_throughput (no SLOs)",
    ]
    # on the wall clock the line says how fast it ran (the rows' time scales)
    real = spec.model_copy(update={"engine": spec.engine.model_copy(update={"clock": "real"})})
    from grid.report.context import measured_lines

    assert ("Time: the twin ran its clock 10x faster than real time while serving (200x until ready); every ms and "
            "per-second value is modelled time (README, 'The twin's clock')") in measured_lines(real, [r for v in verdicts for r in v.rows], plans)
    command = ("python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp-size 1 "
               "--mem-fraction-static 0.85 --disable-cuda-graph --nsa-prefill-backend trtllm --nsa-decode-backend "
               "trtllm --kv-cache-dtype bfloat16 --enable-metrics --trust-remote-code --host 127.0.0.1")
    assert f"```\n{command}\n```" in md and command in out
    assert "grid.twin" not in md and "--port" not in md
    caveats = md.split("## Caveats\n\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert caveats[0].startswith("- The sweep's base turns CUDA graphs off (cuda_graph=false) for every "
                                 "configuration: decode runs kernel by kernel")
    # the answer first: the best, its command and its lead, then the caveats, then what was measured
    assert md.index("**Best:** `mem_fraction_static=0.85`") < md.index(command) < md.index("- Lead over the runner-up") \
        < md.index("## Caveats") < md.index("## What was measured")
    assert ("- Lead over the runner-up `mem_fraction_static=0.9`: +2.6% (400 vs 390 tok/s at concurrency 4); "
            "spread not measured (load.repeats=1): set load.repeats=3 to know how confident") in md
    assert ("- No sweep base to compare with: every configuration sets mem_fraction_static, which SGLang 0.5.9 picks "
            "itself at start-up when unset (add null to that axis of the sweep to measure SGLang's own choice)") in md
    assert ("- **failed startup_oom: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has "
            "a total capacity of 79.11 GiB of which 0 bytes is free. — 1 configuration**") in md   # real, unmasked
    assert ("- TPOT p50 vs output tok/s: 3 of 6 load points on the front (mem_fraction_static=0.85 @ concurrency 1: "
            "101 / 9.00 ms; mem_fraction_static=0.85 @ concurrency 4: 400 / 11.0 ms; mem_fraction_static=0.8 @ "
            "concurrency 4: 380 / 12.0 ms)") not in md   # 0.8@4 is dominated by 0.85@4 (more tok/s, lower TPOT)
    assert ("- TPOT p50 vs output tok/s: 2 of 6 load points on the front (mem_fraction_static=0.85 @ concurrency 1: "
            "101 / 9.00 ms; mem_fraction_static=0.85 @ concurrency 4: 400 / 11.0 ms); the objective's pick "
            "(mem_fraction_static=0.85 @ concurrency 4) is on it") in md
    assert "written to parquet/rejudged/rejudged.parquet" in md


def test_rejudged_table_holds_the_values_the_report_used(recorded_run, tmp_path):
    from grid.storage.parquet import read_table

    spec, plans, _, _, run_dir = recorded_run
    again = spec.model_copy(update={"objective": spec.objective.model_copy(update={
        "kind": "max_goodput", "slo": spec.objective.slo.model_copy(update={"ttft_ms": 42.0, "percentile": 50.0})})})
    verdicts = report(again, Console(record=True, width=250))
    assert [(v.label, v.score) for v in verdicts[:2]] == [("mem_fraction_static=0.9", 4 / 30.0),
                                                          ("mem_fraction_static=0.8", None)]
    import pyarrow.parquet as pq

    rows = {(r["config_hash"], r["point_index"]): r
            for r in pq.read_table(run_dir / "parquet/rejudged/rejudged.parquet").to_pylist()}
    best = rows[(plans[2].config_hash, 0)]
    assert (best["objective_kind"], best["slo_ttft_ms"], best["goodput_req_per_s"], best["slo_ttft_at_pct_ms"]) == \
        ("max_goodput", 42.0, 4 / 30.0, 40.0)
    assert rows[(plans[1].config_hash, 0)]["goodput_req_per_s"] == 0.0
    assert len(rows) == 8 and rows[(plans[3].config_hash, 0)]["goodput_req_per_s"] is None   # failed: not run
    md = (run_dir / "report.md").read_text()
    assert "re-judged for this objective (max_goodput, SLOs p50 TTFT <= 42 ms)" in md
    # the measured table keeps the values of the run that measured it (no SLO: null)
    stored = read_table(run_dir, "load_points").to_pylist()
    assert {r["goodput_req_per_s"] for r in stored} == {None}


def chromium_driver():
    """A headless Chromium through selenium, or a pytest skip naming what is missing."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[dev]')")
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_bin = shutil.which("chromedriver")
    if not browser or not driver_bin:
        pytest.skip("Debian's chromium and chromium-driver are not installed "
                    "(apt-get install -y chromium chromium-driver; .ci/run does this when it can)")
    return webdriver, browser, driver_bin


def test_report_html_in_a_headless_browser(recorded_run, tmp_path_factory):
    webdriver, browser, driver_bin = chromium_driver()
    from selenium.webdriver.chrome.service import Service

    _, _, _, _, run_dir = recorded_run
    page = run_dir / "report.html"
    text = page.read_text()
    assert "<script" not in text and "http://" not in text and "https://" not in text   # self-contained
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1300,2400",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(driver_bin), options=opts)
    try:
        driver.get(page.as_uri())
        assert driver.title == "grid: mem_fraction"
        images = driver.execute_script(
            "return Array.from(document.images).map(i => [i.alt, i.complete, i.naturalWidth, i.naturalHeight])")
        assert [alt for alt, *_ in images] == ["Throughput vs load", "Latency percentiles vs load", "Pareto fronts",
                                               "Timeline of the sweep"]
        assert all(done and w > 300 and h > 150 for _, done, w, h in images), images
        headings = [h.text for h in driver.find_elements("tag name", "h2")]
        # the page leads with the answer: the best, its command, its lead; then the caveats
        assert headings[:4] == ["Best: mem_fraction_static=0.85", "Caveats", "What was measured",
                                "Every configuration x load level"]
        lead = [li.text for li in driver.find_elements("css selector", "#lead li")]
        assert lead[0].startswith("Lead over the runner-up mem_fraction_static=0.9: +2.6% (400 vs 390 tok/s")
        assert driver.find_element("css selector", "pre.cmd").text.startswith("python -m sglang.launch_server")
        levels = [[td.text for td in tr.find_elements("tag name", "td")]
                  for tr in driver.find_elements("css selector", "#levels tr")][1:]
        assert levels[:2] == [["mem_fraction_static=0.85", "best", "concurrency 1", "ok", "101.0", "90", "18.0"],
                              ["mem_fraction_static=0.85", "best", "concurrency 4", "ok", "400.0", "180", "22.0"]]
        assert len(levels) == 6  # 3 configurations x 2 levels; the one that failed at start ran no level
        assert "Why configurations failed (grouped by cause)" in headings
        tail = driver.find_element("tag name", "details")
        assert "server log tail" in tail.text
        shot = run_dir / "report_screenshot.png"
        assert driver.save_screenshot(str(shot))
        assert base64.b64decode(driver.get_screenshot_as_base64())[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        driver.quit()


def test_the_best_configuration_comes_with_its_deployment_files(recorded_run):
    import shlex
    import subprocess

    import yaml

    spec, _, _, _, run_dir = recorded_run
    folder = run_dir / "deploy"
    assert sorted(p.name for p in folder.iterdir()) == ["launch.sh", "lws.yaml", "rayjob.yaml", "rbg.yaml"]
    assert subprocess.run(["bash", "-n", str(folder / "launch.sh")]).returncode == 0
    server = next(line for line in (folder / "launch.sh").read_text().splitlines() if "sglang.launch_server" in line)
    argv = shlex.split(server.strip().removesuffix("&"))
    assert argv[0] == "CUDA_VISIBLE_DEVICES=0" and argv[1:4] == ["python", "-m", "sglang.launch_server"]
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.85" and argv[-4:] == ["--host", "0.0.0.0", "--port",
                                                                                      "30000"]
    lws = yaml.safe_load((folder / "lws.yaml").read_text())
    pod = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    assert pod["image"] == "lmsysorg/sglang:v0.5.9" and pod["command"] == argv[1:]
    job = yaml.safe_load((folder / "rayjob.yaml").read_text())
    assert job["spec"]["entrypoint"] == ("python -m grid.run +sweep=mem_fraction engine=sglang engine.version=0.5.9 "
                                         f"model={spec.model.name} hardware={spec.hardware.name}")
    assert "## Deploy it (deploy/)" in (run_dir / "report.md").read_text()
