"""Which ``PerfModel`` class models a configuration (pure): the plain TP/EP/DP model, or a subclass for a mechanism
kept in its own module (issue 15): pipeline parallelism (grid/twin/pipeline.py), speculative decoding
(grid/twin/speculative.py). ``PerfModel(...)`` calls :func:`perf_class` itself, so callers construct ``PerfModel``
as before."""

from __future__ import annotations


def perf_class(cfg) -> type:
    """The ``PerfModel`` subclass for ``cfg`` (a ``ServingConfig``). Raises ``ValueError`` for pipeline parallelism
    together with speculative decoding (SGLang refuses it: "Pipeline parallelism is not compatible with speculative
    decoding.")."""
    from grid.twin.perf import PerfModel

    pp = max(1, getattr(cfg, "pp_size", 1) or 1)
    spec = getattr(cfg, "speculative_algorithm", None) is not None
    if pp > 1 and spec:
        raise ValueError("Pipeline parallelism is not compatible with speculative decoding.")
    if pp > 1:
        from grid.twin.pipeline import PipelinePerf

        return PipelinePerf
    if spec:
        from grid.twin.speculative import SpeculativePerf

        return SpeculativePerf
    return PerfModel
