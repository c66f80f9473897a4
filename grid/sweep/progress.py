"""Console progress for a running sweep: a line per trial start, load point and verdict (a Tune callback)."""

from __future__ import annotations

from ray import tune

from grid.report.select import level_name


def _fmt(v, unit: str = "", nd: int = 1) -> str:
    return "-" if v is None else f"{v:.{nd}f}{unit}"


class ProgressCallback(tune.Callback):
    def __init__(self, plans: dict, total: int, console) -> None:
        self.plans = plans
        self.total = total
        self.console = console
        self.started = 0

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

    def on_trial_start(self, iteration, trials, trial, **info):
        self.started += 1
        self.console.print(f"[cyan]▶ trial {self.started}/{len(self.plans)}[/] {self._label(trial)}")

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if "point_value" not in result:
            return
        self.console.print(
            f"   point {result.get('point_index')} ({level_name(result)}): {result.get('status')}  "
            f"out {_fmt(result.get('output_tok_per_s'), ' tok/s')}  TTFT p50 {_fmt(result.get('ttft_median_ms'), ' ms', 0)}"
            f"  TPOT p50 {_fmt(result.get('tpot_median_ms'), ' ms')}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        res = trial.last_result or {}
        status = res.get("trial_status", "?")
        color = {"ok": "green", "invalid": "yellow"}.get(status, "red")
        err = (res.get("trial_error_class") or res.get("error_class")) if status != "ok" else None
        detail = f" ({err}{': ' + res['message'] if res.get('message') else ''})" if err else ""
        self.console.print(f"   [{color}]{status}[/]{detail}", highlight=False)

    def on_trial_error(self, iteration, trials, trial, **info):
        self.console.print(f"   [red]trial error[/] {self._label(trial)}: see {trial.local_path}")
