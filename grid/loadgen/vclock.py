"""The virtual clock's protocol, client side (``engine.clock=virtual``; the twin's side is grid/twin/vclock.py).

A twin in virtual mode (``GRID_TWIN_CLOCK=virtual``) keeps no wall clock once it is ready: its modelled clock only
moves when its scheduler steps, and it steps only up to where no stream of the running load point can still send
earlier. A closed-loop point therefore tells the twin which streams it runs and when each sends:

* ``POST /grid/vclock/begin`` with ``{"streams": k}`` before a closed loop of ``k`` streams; the answer
  ``{"vt": t0}`` is the modelled time (s) at which every stream may send its first request. A steady-state point
  adds ``"measured": n`` and marks its requests with :data:`H_ROLE` (``measured`` or ``tail``): once its ``n``-th
  measured request has ended (at ``t1``, the window's end), the twin cuts every tail request still in flight at
  ``t1`` (as the wall-clock runner cancels them there; a tail sent at ``t1`` or later is cut when it arrives), and
  ends each with :func:`timeout_line` of class :data:`TAIL_CUT`: which tail events fall inside the window, and what
  the twin simulates after it, then depend on nothing but the point.
* each request carries :data:`H_VT` (the modelled send time, s, ``repr`` of a float), :data:`H_STREAM` (the
  stream, ``0..k-1``), :data:`H_SEQ` (the request's index in the point: ties in arrival time go by it) and, on a
  stream's last request when the client knows it is the last, :data:`H_LAST` ``1``;
* each streamed event (one per scheduler step that produced tokens for the request) then carries
  ``"grid_vt"``: the modelled time (s) at which the twin emitted it; a stream's next request is sent at or after the
  last event's ``grid_vt`` (a closed loop at once; a user of a session after their think time; a slot of a capped
  open loop at the next arrival's scheduled time if that is later);
* ``POST /grid/vclock/done`` with ``{"stream": s}`` once stream ``s`` sends no more (not needed after a request
  marked :data:`H_LAST` that the twin answered).
* ``GET /grid/vclock/samples?from=F&to=T`` answers the snapshots of ``/metrics`` and the modelled GPU telemetry the
  twin took at each point's start, every few modelled seconds of it and at its end
  (``{"samples": [{"vt", "kind", "metrics", "telemetry"}]}``, ``kind`` one of grid/twin/server.py's
  ``SNAPSHOT_KINDS``): what grid's samplers record for a point instead of polling the twin in real time.
* the client's timeouts travel with each request in modelled seconds (:data:`H_STALL`: no new token for that long;
  :data:`H_READ`: no bytes for that long) and the twin plays them: at the modelled instant the client would give up,
  it aborts the request (its KV freed, as SGLang does when a client disconnects) and ends the response with the SSE
  comment line :func:`timeout_line` (``: grid-timeout stall_timeout 4105.25``), which every SSE parser skips; the
  stream may send again from that instant. A dead scheduler, a hang or an overloaded queue thus fails requests with
  ``stall_timeout``/``read_timeout`` at the same modelled times on any host, and takes no real time.

The twin never lets its clock pass the earliest time at which a stream may still send (its *horizon*): while a
stream's request is in flight that stream cannot send; once it ended at ``e`` it may send from ``e``. Every load plan
is a set of streams: a closed loop of ``k`` workers is ``k`` streams; a session's user is a stream; a capped open
loop is one stream per slot; an uncapped open loop (Poisson, gamma, constant or a recorded trace) is one stream per
request, each sending once at its scheduled time and marked :data:`H_LAST`.

A request without these headers (any other client: SGLang's bench_serving, curl) is served too, arriving at the
twin's current modelled time; its events carry no ``grid_vt``. Pure helpers only; the runner does the I/O.
"""

from __future__ import annotations

import re

CLOCKS = ("real", "virtual")
H_VT = "X-Grid-VT"
H_STREAM = "X-Grid-Stream"
H_SEQ = "X-Grid-Seq"
H_LAST = "X-Grid-Last"
H_STALL = "X-Grid-Stall-S"
H_READ = "X-Grid-Read-S"
H_ROLE = "X-Grid-Role"
#: The roles a request of a steady-state point carries in :data:`H_ROLE`
ROLES = ("measured", "tail")
#: The class of :func:`timeout_line` that ends a tail request the twin cut at the window's end
TAIL_CUT = "tail_cut"
BEGIN_PATH = "/grid/vclock/begin"
DONE_PATH = "/grid/vclock/done"
SAMPLES_PATH = "/grid/vclock/samples"
FIELD = "grid_vt"
#: Environment variable that puts the twin on the virtual clock (``virtual``) or the scaled wall clock (``real``)
ENV_CLOCK = "GRID_TWIN_CLOCK"

_LAST_VT = re.compile(rb'"grid_vt":\s*([-+0-9.eE]+)')
_TIMEOUT = b": grid-timeout "
_TIMEOUT_RE = re.compile(rb": grid-timeout (stall_timeout|read_timeout|tail_cut) ([-+0-9.eE]+)")
#: The error classes a twin on the virtual clock plays (grid/loadgen/records.py)
TIMEOUT_CLASSES = ("stall_timeout", "read_timeout")


def headers(vt: float, stream: int, seq: int, last: bool = False, stall_s: float | None = None,
            read_s: float | None = None, role: str | None = None) -> dict[str, str]:
    """The headers of a request that stream ``stream`` sends at modelled time ``vt`` (s) as request ``seq``
    (``last``: the stream sends nothing after it; ``stall_s``/``read_s``: the client's timeouts, modelled s;
    ``role``: one of :data:`ROLES` in a steady-state point)."""
    out = {H_VT: repr(float(vt)), H_STREAM: str(int(stream)), H_SEQ: str(int(seq))}
    if role is not None:
        out[H_ROLE] = role
    if last:
        out[H_LAST] = "1"
    if stall_s is not None:
        out[H_STALL] = repr(float(stall_s))
    if read_s is not None:
        out[H_READ] = repr(float(read_s))
    return out


def timeout_line(error_class: str, vt: float) -> bytes:
    """The SSE comment that ends a response the twin timed out for its client, ``error_class`` one of
    :data:`TIMEOUT_CLASSES`, or cut at the window's end (:data:`TAIL_CUT`), at modelled time ``vt`` (s)."""
    return _TIMEOUT + f"{error_class} {vt!r}\n\n".encode()


def timed_out(reads: list[tuple[int, bytes]]) -> tuple[str, float] | None:
    """``(error class, modelled s)`` when a response's reads end with :func:`timeout_line`, else None."""
    tail = b"".join(d for _, d in reads[-2:])[-300:]  # the line is the response's last bytes
    found = _TIMEOUT_RE.findall(tail)
    return (found[-1][0].decode(), float(found[-1][1])) if found else None


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
