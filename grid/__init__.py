"""grid: find the best SGLang server configuration for a model on your GPUs."""

__version__ = "0.1.0"
