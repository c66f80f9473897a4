"""grid: find the best SGLang server configuration for a model on your GPUs."""

__version__ = "0.1.0"

__all__ = ["read_results"]


def __getattr__(name: str):
    """``grid.read_results(run_dir, "load_points")``: a run's table as a DataFrame, every file's columns kept
    (grid.storage.parquet.read_results). Imported on first use so that ``import grid`` stays light."""
    if name == "read_results":
        from grid.storage.parquet import read_results

        return read_results
    raise AttributeError(f"module 'grid' has no attribute {name!r}")
