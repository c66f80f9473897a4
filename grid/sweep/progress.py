"""Console progress for a running sweep: a line per trial start, load point and verdict (a Tune callback)."""

from __future__ import annotations

import time

from ray import tune

from grid.plan import level_name
from grid.metrics.hostnoise import host_noise, lost_pct, noise_text, perturbed


def _fmt(v, unit: str = "", nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}{unit}"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def eta_text(elapsed_s: float, done: int, total: int) -> str:
    """``2m10s elapsed, ~31m00s left`` for a sweep ``elapsed_s`` seconds in with ``done`` of ``total`` trials
    finished (the time left assumes the remaining trials take as long on average; none is given before the first)."""
    text = f"{_duration(elapsed_s)} elapsed"
    if done > 0 and total > done:
        text += f", ~{_duration(elapsed_s / done * (total - done))} left"
    return text


def time_left_s(shares_s: dict[str, float], launches_left: int) -> float | None:
    """Seconds left in a sweep, from the wall time each finished trial took (``shares_s``: config hash -> seconds
    since the trial that finished before it, or since the sweep's start: the gaps between trials count, and trials
    that ran side by side on several nodes share the wall time) and the launches still to come: their mean times the
    launches left. None when no trial has finished yet while launches are left. (Refusals are recorded before the
    sweep, without a trial: grid.sweep.driver.record_refusals.)"""
    if not launches_left:
        return 0.0
    if not shares_s:
        return None
    return sum(shares_s.values()) / len(shares_s) * launches_left


def _repeat(result: dict) -> str:
    """``, repeat 2`` for a load point measured again (``load.repeats``: ``repeat_index`` 1, 2, ...); "" for the
    first measurement or when the result does not say."""
    r = result.get("repeat_index")
    return f", repeat {r}" if r else ""

class ProgressCallback(tune.Callback):
    """``expected``: the hashes the search expects to launch (grid.search.plan ``expected_launches``); with them the
    time left counts the launches the search expects (``time_left_s``), without them every trial left
    (``eta_text``)."""

    def __init__(self, plans: dict, total: int, console, expected: list[str] | None = None) -> None:
        self.plans = plans
        self.total = total
        self.console = console
        self.started = 0
        self.finished = 0
        self.t0: float | None = None  # time.monotonic() at the first trial's start
        self.expected = None if expected is None else [h for h in expected if h in plans]
        self.last_end: float | None = None      # time.monotonic() at the last verdict
        self.shares_s: dict[str, float] = {}    # config hash -> wall seconds since the verdict before its own

    def __getstate__(self) -> dict:  # Tune pickles callbacks with the experiment; a console holds locks
        state = dict(self.__dict__)
        state["console"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        from rich.console import Console

        self.__dict__.update(state)
        self.console = self.console or Console()

    def _label(self, trial) -> str:
        plan = self.plans.get(trial.config.get("config_hash"))
        return plan.label if plan else trial.trial_id

    def _eta(self, now: float) -> str:
        assert self.t0 is not None
        elapsed = now - self.t0
        if self.expected is None:
            return eta_text(elapsed, self.finished, len(self.plans))
        left = time_left_s(self.shares_s, len([h for h in self.expected if h not in self.shares_s]))
        text = f"{_duration(elapsed)} elapsed"
        return text + (f", ~{_duration(left)} left" if left else "")

    def _count(self) -> str:
        """``3/4`` (this trial of the launches the search expects, or of every configuration to run without a search
        plan); ``5 (4 expected)`` once a search launches more than it expected."""
        of = len(self.plans) if self.expected is None else len(self.expected)
        return f"{self.started}/{of}" if self.started <= of else f"{self.started} ({of} expected)"

    def on_trial_start(self, iteration, trials, trial, **info):
        self.started += 1
        now = time.monotonic()
        if self.t0 is None:
            self.t0 = now
        eta = self._eta(now) if self.started > 1 else ""
        self.console.print(f"[cyan]▶ trial {self._count()}[/] {self._label(trial)}"
                           + (f"  [dim]({eta})[/]" if eta else ""))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if result.get("note"):
            self.console.print(f"   [yellow]{result['note']}[/]", highlight=False, soft_wrap=True)
        if "point_value" not in result:
            return
        self.console.print(
            f"   point {result.get('point_index')} ({level_name(result)}{_repeat(result)}): {result.get('status')}  "
            f"out {_fmt(result.get('output_tok_per_s'), ' tok/s')}  TTFT p50 {_fmt(result.get('ttft_median_ms'), ' ms', 0)}"
            f"  TPOT p50 {_fmt(result.get('tpot_median_ms'), ' ms')}"
            + (f"  (host noise, not counted: {noise_text(result)})" if host_noise(result) else
               f"  (the host took {lost_pct(result):.1f}% of its time: values may be off by about as much)"
               if perturbed(result) else ""),
            highlight=False)

    def _finished(self, trial) -> None:
        self.finished += 1
        now = time.monotonic()
        since = self.last_end if self.last_end is not None else self.t0
        if since is not None:
            self.shares_s[trial.config.get("config_hash")] = now - since
        self.last_end = now

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._finished(trial)
        res = trial.last_result or {}
        status = res.get("trial_status", "?")
        color = {"ok": "green", "invalid": "yellow"}.get(status, "red")
        err = (res.get("trial_error_class") or res.get("error_class")) if status != "ok" else None
        detail = f" ({err}{': ' + res['message'] if res.get('message') else ''})" if err else ""
        self.console.print(f"   [{color}]{status}[/]{detail}", highlight=False)

    def on_trial_error(self, iteration, trials, trial, **info):
        self._finished(trial)
        self.console.print(f"   [red]trial error[/] {self._label(trial)}: see {trial.local_path}")
