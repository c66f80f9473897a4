"""Which ``PerfModel`` class models a configuration (pure): the plain TP/EP/DP model, or a subclass for a mechanism
kept in its own module (issue 15): pipeline parallelism (grid/twin/pipeline.py), speculative decoding
(grid/twin/speculative.py), with sliding-window or hybrid linear attention (grid/twin/attention.py) mixed into
either. ``PerfModel(...)``
calls :func:`perf_class` itself, so callers construct ``PerfModel`` as before."""

from __future__ import annotations

import functools


def perf_class(cfg, model=None) -> type:
    """The ``PerfModel`` subclass for ``cfg`` (a ``ServingConfig``) and ``model`` (a ``ModelSpec``). Raises
    ``ValueError`` for pipeline parallelism together with speculative decoding (SGLang refuses it: "Pipeline
    parallelism is not compatible with speculative decoding.")."""
    from grid.twin.perf import PerfModel

    pp = max(1, getattr(cfg, "pp_size", 1) or 1)
    spec = getattr(cfg, "speculative_algorithm", None) is not None
    if pp > 1 and spec:
        raise ValueError("Pipeline parallelism is not compatible with speculative decoding.")
    base = PerfModel
    if pp > 1:
        from grid.twin.pipeline import PipelinePerf

        base = PipelinePerf
    elif spec:
        from grid.twin.speculative import SpeculativePerf

        base = SpeculativePerf
    if getattr(model, "sliding_window", 0):
        return _mixed("SlidingWindowMixin", base)
    if getattr(model, "linear_attention_layers", 0):
        return _mixed("HybridLinearMixin", base)
    return base


@functools.cache
def _mixed(mixin: str, base: type) -> type:
    from grid.twin import attention

    cls = getattr(attention, mixin)
    return type(mixin.replace("Mixin", "") + base.__name__, (cls, base), {})
