"""The twin's virtual clock (``GRID_TWIN_CLOCK=virtual``): which arrivals are due and how far the scheduler may run.

The protocol is described in grid/loadgen/vclock.py. :class:`VClock` is pure bookkeeping, all times in modelled
seconds: the streams of the running load point with each one's *bound* (the earliest modelled time at which it may
still send: ``inf`` while its request is in flight, the end of its last answer after it, gone once it is done or once
the request it marked as its last has ended), and a heap of arrivals at the scheduler (send time + front-end
latency). The earliest bound is kept in a lazy heap, so an open-loop point of thousands of one-request streams costs
``O(log n)`` per step. The server's loop releases an arrival only when
it lies before :meth:`horizon`, and steps the scheduler from ``t`` only while ``t < horizon()``: nothing can then
arrive before ``t``, so every result is a function of the requests and their send times, not of the host.
"""

from __future__ import annotations

import contextvars
import heapq
import math
from typing import Any, Callable, NamedTuple

#: Each point's streams start at the next multiple of this many modelled seconds, so a point's arithmetic (float
#: sums of send times and step durations) does not depend on how much modelled time passed before it (health
#: checks, the twin's own start-up).
EPOCH_S = 4096.0

class Tag(NamedTuple):
    """A request's virtual-clock headers (grid/loadgen/vclock.py)."""

    vt: float  # modelled send time, s
    stream: int
    seq: int  # the client's request index: ties in arrival time go by it
    last: bool = False  # the stream sends nothing after this request
    stall_s: float | None = None  # the client's stall timeout (no new token for this long), modelled s
    read_s: float | None = None  # the client's read timeout (no bytes for this long), modelled s
    role: str | None = None  # a steady-state point's "measured" or "tail" request (grid/loadgen/vclock.py ROLES)


#: The virtual-clock headers of the HTTP request being handled (set by the twin's middleware ``TwinAPI._vclock_mw``;
#: None without them).
VCLOCK_TAG: contextvars.ContextVar[Tag | None] = contextvars.ContextVar("vclock_tag", default=None)


def parse_tag(headers) -> Tag | None:
    """The :class:`Tag` of a request's headers, None when they are missing or malformed (the request is then served
    as any client's)."""
    from grid.loadgen import vclock as proto

    try:
        vt = float(headers[proto.H_VT])
        stream = int(headers[proto.H_STREAM])
        seq = int(headers.get(proto.H_SEQ, 0))
        stall, read = (float(headers[h]) if h in headers else None for h in (proto.H_STALL, proto.H_READ))
    except (KeyError, ValueError, TypeError):
        return None
    if not math.isfinite(vt) or any(x is not None and not x > 0 for x in (stall, read)):
        return None
    role = headers.get(proto.H_ROLE)
    return Tag(vt, stream, seq, headers.get(proto.H_LAST) == "1", stall, read, role if role in proto.ROLES else None)


def limit_of(tag: Tag | None) -> tuple[str, float] | None:
    """The client timeout that fires first for a request with ``tag``, as ``(error class, modelled s)``: the stall
    timeout (no new token) or the read timeout (no bytes), whichever is shorter (the twin's streamed events carry
    each step's tokens, so both count from the last token, or from the send before the first); None without
    either."""
    if tag is None:
        return None
    limits = [(s, c) for s, c in ((tag.stall_s, "stall_timeout"), (tag.read_s, "read_timeout")) if s is not None]
    if not limits:
        return None
    s, c = min(limits)
    return c, s


class Deadlines:
    """The requests whose client gives up after a modelled timeout (:func:`limit_of`), in a lazy heap keyed by the
    earliest time each could time out. An entry is only a lower bound: the owner re-checks the request's progress
    when its time comes and pushes it again if it moved (once per timeout span at most). Entries whose item is
    ``done`` (its request ended) are dropped before they count, so an idle twin never jumps its clock to the deadline
    of a request already answered. Pure."""

    def __init__(self, done: Callable[[Any], bool]) -> None:
        self._heap: list[tuple[float, int, Any]] = []
        self._n = 0
        self._done = done

    def push(self, at: float, item: Any) -> None:
        heapq.heappush(self._heap, (at, self._n, item))
        self._n += 1

    def next_at(self) -> float:
        """The earliest live entry's time (modelled s), ``inf`` when there is none."""
        heap = self._heap
        while heap and self._done(heap[0][2]):
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def pop(self) -> tuple[float, Any]:
        at, _, item = heapq.heappop(self._heap)
        return at, item


class VClock:
    """Stream bounds and pending arrivals of a twin on the virtual clock. Pure (no clock, no I/O)."""

    def __init__(self) -> None:
        self.bounds: dict[int, float] = {}
        self._last: set[int] = set()  # streams whose request in flight is their last
        self._low: list[tuple[float, int]] = []  # (bound, stream), lazily pruned: an entry counts while it is current
        self._heap: list[tuple[float, int, int, Any]] = []
        self._n = 0
        #: a steady-state point's measured requests not yet ended (None: the point declared none), and the modelled
        #: time its last one ended: the window's end, when its tail requests are cut (grid/loadgen/vclock.py)
        self.measured_left: int | None = None
        self.window_end: float | None = None

    def _set(self, stream: int, bound: float) -> None:
        self.bounds[stream] = bound
        if bound < math.inf:
            heapq.heappush(self._low, (bound, stream))

    def begin(self, streams: int, now: float, measured: int | None = None) -> float:
        """A load point of ``streams`` streams begins (``measured``: a steady-state point's count of measured
        requests); returns the modelled time (s) at which they may first send, the next multiple of :data:`EPOCH_S`
        after ``now``. Streams of an earlier point are forgotten."""
        t0 = (math.floor(now / EPOCH_S) + 1) * EPOCH_S
        self.drop_all()
        self.measured_left, self.window_end = (int(measured) if measured else None), None
        self.bounds = {s: t0 for s in range(int(streams))}
        self._low = [(t0, s) for s in range(int(streams))]  # sorted, so already a heap
        return t0

    def running(self, stream: int | None) -> bool:
        """Whether ``stream`` is a stream of the running point that may still send."""
        return stream is not None and stream in self.bounds and stream not in self._last

    def sent(self, stream: int | None, last: bool = False) -> None:
        """Stream ``stream`` sent a request: it cannot send again before that request ends (``last``: ever)."""
        if stream is not None and self.running(stream):
            self.bounds[stream] = math.inf
            if last:
                self._last.add(stream)

    def ended(self, stream: int | None, t: float) -> None:
        """Stream ``stream``'s request ended at modelled time ``t``: the stream may send again from ``t``, unless
        that request was its last."""
        if stream is None or stream not in self.bounds:
            return
        if stream in self._last:
            self.done(stream)
        else:
            self._set(stream, t)

    def measured_ended(self, t: float) -> bool:
        """A measured request of the running point ended at modelled time ``t``; True when it was the last one (the
        window ends at ``t``: :attr:`window_end`)."""
        if self.measured_left is None or self.window_end is not None:
            return False
        self.measured_left -= 1
        if self.measured_left > 0:
            return False
        self.window_end = t
        return True

    def done(self, stream: int) -> None:
        """Stream ``stream`` sends no more."""
        self.bounds.pop(stream, None)
        self._last.discard(stream)

    def drop_all(self) -> None:
        """Forget every stream (a stalled client: the real-time backstop)."""
        self.bounds.clear()
        self._last.clear()
        self._low.clear()

    def horizon(self) -> float:
        """The earliest modelled time (s) at which a stream may still send (``inf``: none can)."""
        low, bounds = self._low, self.bounds
        while low and bounds.get(low[0][1]) != low[0][0]:
            heapq.heappop(low)
        return low[0][0] if low else math.inf

    def push(self, at: float, seq: int, item: Any) -> None:
        """An arrival at the scheduler at modelled time ``at``; ties go by ``seq`` (the client's request index), then
        by the order of pushing."""
        heapq.heappush(self._heap, (at, seq, self._n, item))
        self._n += 1

    def next_at(self) -> float | None:
        """The modelled time of the earliest pending arrival, None when there is none."""
        return self._heap[0][0] if self._heap else None

    def pop(self) -> tuple[float, Any]:
        """Remove and return the earliest pending arrival ``(at, item)``."""
        at, _, _, item = heapq.heappop(self._heap)
        return at, item

    def pending(self) -> int:
        return len(self._heap)
