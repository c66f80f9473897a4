"""The virtual clock's protocol, client side (``engine.clock=virtual``; the twin's side is grid/twin/vclock.py).

A twin in virtual mode (``GRID_TWIN_CLOCK=virtual``) keeps no wall clock once it is ready: its modelled clock only
moves when its scheduler steps, and it steps only up to where no stream of the running load point can still send
earlier. A closed-loop point therefore tells the twin which streams it runs and when each sends:

* ``POST /grid/vclock/begin`` with ``{"streams": k}`` before a closed loop of ``k`` streams; the answer
  ``{"vt": t0}`` is the modelled time (s) at which every stream may send its first request.
* each request carries :data:`H_VT` (the modelled send time, s, ``repr`` of a float), :data:`H_STREAM` (the
  stream, ``0..k-1``) and :data:`H_SEQ` (the request's index in the point: ties in arrival time go by it);
* each streamed event (one per scheduler step that produced tokens for the request) then carries
  ``"grid_vt"``: the modelled time (s) at which the twin emitted it; a stream's next request is sent at the last
  event's ``grid_vt`` (a closed loop sends as soon as the previous answer ended);
* ``POST /grid/vclock/done`` with ``{"stream": s}`` once stream ``s`` sends no more.

A request without these headers (any other client: SGLang's bench_serving, curl) is served too, arriving at the
twin's current modelled time; its events carry no ``grid_vt``. Pure helpers only; the runner does the I/O.
"""

from __future__ import annotations

import re

CLOCKS = ("real", "virtual")
H_VT = "X-Grid-VT"
H_STREAM = "X-Grid-Stream"
H_SEQ = "X-Grid-Seq"
BEGIN_PATH = "/grid/vclock/begin"
DONE_PATH = "/grid/vclock/done"
FIELD = "grid_vt"
#: Environment variable that puts the twin on the virtual clock (``virtual``) or the scaled wall clock (``real``)
ENV_CLOCK = "GRID_TWIN_CLOCK"

_LAST_VT = re.compile(rb'"grid_vt":\s*([-+0-9.eE]+)')


def headers(vt: float, stream: int, seq: int) -> dict[str, str]:
    """The headers of a request that stream ``stream`` sends at modelled time ``vt`` (s) as request ``seq``."""
    return {H_VT: repr(float(vt)), H_STREAM: str(int(stream)), H_SEQ: str(int(seq))}


def last_vt(reads: list[tuple[int, bytes]]) -> float | None:
    """The ``grid_vt`` (modelled s) of the last event among a response's reads (``(stamp, bytes)``), None when no
    event carried one. Scans from the end (the reads of one SSE stream, in order)."""
    tail = b""
    for _, data in reversed(reads):
        tail = data + tail
        found = _LAST_VT.findall(tail)
        if found:
            return float(found[-1])
        if len(tail) > 1 << 20:
            break
    return None


def to_ns(vt: float) -> int:
    """Modelled seconds to the integer nanoseconds a record's ``*_perf_ns`` fields hold in virtual mode."""
    return int(round(vt * 1e9))
