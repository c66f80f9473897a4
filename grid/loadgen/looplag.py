"""How late an asyncio event loop runs: the host-noise probe of the load generator.

A process whose loop is starved of CPU (a busy host: other jobs, a loaded CI runner) sends requests late and reads
tokens late, so every time it measures grows by that delay. :class:`LoopLag` runs one task beside the work that
sleeps ``PERIOD_S`` and adds up how late it woke; the sum over a load point, divided by the point's real length, is
the share of the point the loop lost (``client_lag_pct``; not recorded against the twin's virtual clock, where
nothing the client times is real). Only lateness beyond ``GRACE_S`` per wake-up counts: a loop busy with its own work is not
host noise.
"""

from __future__ import annotations

import asyncio
import time

PERIOD_S = 0.02  # the probe's sleep
#: Lateness up to this much per wake-up is the loop's own: timer overshoot and one of its own callbacks (a few hundred
#: microseconds to about a millisecond on a quiet 2-core machine); a host that runs other jobs delays a runnable
#: process by whole scheduler time slices (milliseconds each), which is what counts.
GRACE_S = 0.002


class LoopLag:
    """``start()`` inside a running loop; ``late_s``: real seconds the probe woke late beyond ``GRACE_S``, in all;
    ``max_s`` the worst single wake-up; ``await stop()`` ends the probe."""

    def __init__(self, period_s: float = PERIOD_S) -> None:
        self.period_s = period_s
        self.late_s = 0.0
        self.max_s = 0.0
        self._task: asyncio.Future | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            due = time.perf_counter() + self.period_s
            await asyncio.sleep(self.period_s)
            late = max(0.0, time.perf_counter() - due)
            self.late_s += max(0.0, late - GRACE_S)
            self.max_s = max(self.max_s, late)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
