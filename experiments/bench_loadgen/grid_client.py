"""grid's load generator as a command-line client for the benchmark (one closed-loop load point).

``python grid_client.py URL API CONCURRENCY NUM_REQUESTS OUTPUT_TOKENS OUT_JSONL``: writes one JSON line per
request: ``text`` (the server echoes its request id in it), ``start_ns`` (send stamp), ``token_ns`` (arrival stamp of
every chunk that carried tokens) and ``tokens`` (tokens per such chunk), all ``perf_counter_ns``.
"""

from __future__ import annotations

import json
import sys

from grid.loadgen.dataset import random_prompts
from grid.loadgen.runner import LoadPoint, Target, run_load_point_sync


def main() -> None:
    url, api, conc, num, out_tokens, out = sys.argv[1:7]
    conc, num, out_tokens = int(conc), int(num), int(out_tokens)
    prompts = random_prompts(num, 16, out_tokens, 1.0, 32000, seed=0, as_text=(api == "chat"))
    res = run_load_point_sync(Target(url, api=api, model="bench-model"), LoadPoint("concurrency", conc, num), prompts,
                              read_timeout_s=120)
    with open(out, "w") as f:
        for r in res.records:
            toks = [(t, k) for t, k in zip(r.chunk_perf_ns, r.chunk_tokens) if k]
            f.write(json.dumps({"ok": r.status == "ok", "text": r.text, "start_ns": r.send_perf_ns,
                                "token_ns": [t for t, _ in toks], "tokens": [k for _, k in toks]}) + "\n")


if __name__ == "__main__":
    main()
