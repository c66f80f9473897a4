"""Wall-clock margins for tests that time real processes and sockets.

A bound that holds on a quiet machine is stretched by the host's load: a machine running ``k`` runnable threads per
core gives each process about ``1 / k`` of a core, so what takes ``t`` quiet takes up to about ``k x t``. Upper bounds
on elapsed real time are written ``budget_s * slack()``; lower bounds (a timeout that must have been waited for) are
never stretched. Modelled values (the twin's virtual time) need no slack. The stretch stops at :data:`SLACK_CAP`: the
load average counts the tests' own processes too, so an uncapped stretch would grow with the work of the code under
test, and a test slower than the capped bound fails."""

from __future__ import annotations

import os

#: The most a bound is stretched: the suite is claimed to pass on a machine loaded to 4 runnable threads per core
#: (experiments/loaded_suite.py, 4 CPU burners per core by default). Beyond that a failure is the machine's, and a
#: test that needs more than 4x its quiet time at a lighter load is too slow, not unlucky.
SLACK_CAP = 4.0


def host_load_per_core() -> float:
    """This host's 1-minute load average per CPU core this process may use (``os.getloadavg`` over
    ``os.sched_getaffinity``); 0.0 where the platform has no load average."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return load / max(1, cores)


def slack() -> float:
    """How many times longer than on a quiet machine a real-time step may take here now: the host's 1-minute load
    average per core (:func:`host_load_per_core`), at least 1 and at most :data:`SLACK_CAP`."""
    return min(SLACK_CAP, max(1.0, host_load_per_core()))


#: The override for tests that check verdicts, orchestration, resume or tables on a server that keeps real time (real
#: SGLang, the twin with engine.clock=real), not numbers: every load point counts.
#: Under the default bound (objective.host_noise_max_pct 20) a host loaded to several runnable threads per core made
#: every point host noise (measured while Ray still ran its workers at niceness 15; README, "The twin's clock"): the
#: search stopped launching, no best was named, and a resume measured the points again.
COUNT_HOST_NOISE = "objective.host_noise_max_pct=1000"
