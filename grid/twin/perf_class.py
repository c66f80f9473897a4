"""Which ``PerfModel`` class models a configuration (pure): the plain TP/EP/DP model, or a subclass for a mechanism
kept in its own module: pipeline parallelism (grid/twin/pipeline.py), speculative decoding
(grid/twin/speculative.py), with tensor parallelism across nodes (grid/twin/crossnode.py) and sliding-window or
hybrid linear attention (grid/twin/attention.py) mixed into either. ``PerfModel(...)`` calls :func:`perf_class`
itself, so callers construct ``PerfModel`` as before."""

from __future__ import annotations

import functools


def perf_class(cfg, model=None, hardware=None) -> type:
    """The ``PerfModel`` subclass for ``cfg`` (a ``ServingConfig``), ``model`` (a ``ModelSpec``) and ``hardware`` (a
    ``HardwareSpec``). Raises ``ValueError`` for pipeline parallelism together with speculative decoding (the twin
    cannot model them together: grid/releases/checks.py ``twin_pp_speculative``) and for ``cfg.nnodes`` > 1 that
    grid/twin/crossnode.py cannot model on ``hardware`` (grid/releases/checks.py ``cross_node_refusal``)."""
    from grid.twin.perf import PerfModel

    pp = max(1, getattr(cfg, "pp_size", 1) or 1)
    spec = getattr(cfg, "speculative_algorithm", None) is not None
    if pp > 1 and spec:
        from grid.releases.checks import TWIN_PP_SPECULATIVE

        raise ValueError(TWIN_PP_SPECULATIVE.format(pp, cfg.speculative_algorithm))
    base: type = PerfModel
    if pp > 1:
        from grid.twin.pipeline import PipelinePerf

        base = PipelinePerf
    elif spec:
        from grid.twin.speculative import SpeculativePerf

        base = SpeculativePerf
    if int(getattr(cfg, "nnodes", 1) or 1) > 1:
        from grid.releases.checks import cross_node_refusal

        why = cross_node_refusal({"nnodes": cfg.nnodes, "tp_size": cfg.tp_size, "pp_size": pp,
                                  "dp_size": cfg.dp_size, "moe_a2a_backend": cfg.moe_a2a_backend}, hardware)
        if why is not None:
            raise ValueError(f"the twin cannot model --nnodes {cfg.nnodes} here: {why}")
        base = _mixed("crossnode", "CrossNodeMixin", base)
    if getattr(model, "sliding_window", 0):
        return _mixed("attention", "SlidingWindowMixin", base)
    if getattr(model, "linear_attention_layers", 0):
        return _mixed("attention", "HybridLinearMixin", base)
    return base


@functools.cache
def _mixed(module: str, mixin: str, base: type) -> type:
    import importlib

    cls = getattr(importlib.import_module(f"grid.twin.{module}"), mixin)
    return type(mixin.replace("Mixin", "") + base.__name__, (cls, base), {})
