"""One real request through every prefill-decode pair of a deployment, before any load.

SGLang's router sends each request of a disaggregated deployment to one prefill and one decode server at once, the
same body with three fields added: the prefill server's ``bootstrap_host``, its ``bootstrap_port``
(``--disaggregation-bootstrap-port``) and a ``bootstrap_room`` (a random id that pairs the two halves); the decode
server fetches the prompt's KV cache from the prefill server through that bootstrap address and answers with the
output (sgl-project/sglang ``docs/advanced_features/pd_disaggregation.md``; the fields are ``GenerateReqInput``'s in
every release 0.5.9-0.5.23). A pair whose transfer fails (a network or RDMA setup between two nodes that does not
work, a pair SGLang cannot transfer between, grid/releases/checks.py ``PAIR_RULES``) fails its first request with an
error or a hang; through the router such a failure lands in the load, spread over whichever requests met that pair.
:func:`check_pairs` sends one request to each pair directly, as the router would, so the launch fails naming the
pair instead.

Measured on the released servers here (CPU; docs/topology.md "SGLang's prefill-decode mode on a CPU"): a decode server
refuses a request without a bootstrap room (0.5.9, HTTP 400) or dies of it (0.5.23), so the pairs are only ever sent
requests with all three fields.
"""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlparse

from grid.server.net import urlopen

#: The prompt of the pair check and how many tokens it asks for: a few, greedy (the probe judges the answers).
PAIR_PROMPT = "The capital city of France is"
PAIR_MAX_NEW_TOKENS = 4
ERROR_CHARS = 300


@dataclass(frozen=True)
class PairServer:
    """A server of a pair: its ``name`` (``prefill 0``), ``url`` and, for a prefill server, ``bootstrap_port``."""

    name: str
    url: str
    bootstrap_port: int | None = None


def pair_body(prefill: PairServer, room: int) -> dict:
    """The ``/generate`` body both servers of a pair get: the prompt, greedy sampling of ``PAIR_MAX_NEW_TOKENS``, and
    the prefill server's bootstrap address with ``room``. Raises ``ValueError`` for a prefill server without a
    bootstrap port. Pure."""
    if prefill.bootstrap_port is None:
        raise ValueError(f"{prefill.name}: a prefill server needs its bootstrap port")
    return {"text": PAIR_PROMPT, "sampling_params": {"max_new_tokens": PAIR_MAX_NEW_TOKENS, "temperature": 0},
            "bootstrap_host": urlparse(prefill.url).hostname, "bootstrap_port": prefill.bootstrap_port,
            "bootstrap_room": room}


def _post(url: str, body: dict, api_key: str | None, timeout_s: float) -> tuple[int | None, str]:
    """(HTTP status, body text) of ``POST url/generate``; (None, why) when nothing answered in ``timeout_s``."""
    req = urllib.request.Request(url.rstrip("/") + "/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urlopen(req, timeout=timeout_s) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, (err.read() or b"").decode("utf-8", "replace")
    except (OSError, ValueError) as err:
        return None, f"{type(err).__name__}: {err}"


def _verdict(status: int | None, text: str, decode: bool) -> str | None:
    """Why one side's answer is not a served pair request (None: it is). The decode side must answer 200 with
    output text; the prefill side 200."""
    if status is None:
        return f"no answer ({text[:ERROR_CHARS]})"
    if status != 200:
        return f"HTTP {status}: {text.strip()[:ERROR_CHARS]}"
    if decode:
        try:
            out = json.loads(text)
        except ValueError:
            return f"not JSON: {text[:ERROR_CHARS]}"
        if not isinstance(out, dict) or not out.get("text"):
            return f"no output text: {text[:ERROR_CHARS]}"
    return None


def check_pairs(prefill: list[PairServer], decode: list[PairServer], api_key: str | None = None,
                timeout_s: float = 600.0, seed: int | None = None) -> list[str]:
    """Send one request through every (prefill, decode) pair, each pair's two halves at once and the pairs one
    after another; each pair gets its own random ``bootstrap_room`` (``seed`` fixes them). Returns one line per pair
    that failed, ``prefill 0 -> decode 1: decode: HTTP 500: ...`` (empty: every pair served its request)."""
    rng = random.Random(seed)
    failed: list[str] = []
    with ThreadPoolExecutor(2) as pool:
        for p in prefill:
            for d in decode:
                body = pair_body(p, rng.getrandbits(63))
                sides = [pool.submit(_post, s.url, body, api_key, timeout_s) for s in (p, d)]
                (p_status, p_text), (d_status, d_text) = (f.result() for f in sides)
                why = [f"{side}: {w}" for side, w in (("decode", _verdict(d_status, d_text, True)),
                                                      ("prefill", _verdict(p_status, p_text, False))) if w]
                if why:
                    failed.append(f"{p.name} -> {d.name}: {'; '.join(why)}")
    return failed
