"""GPU telemetry during load points: NVML on a real node (nvml.py, topology.py), the twin's modelled telemetry
(modelled.py). Both produce rows of the ``gpu_telemetry`` table (grid/storage/schema.py) and the same load-point
summary columns (summary.py), which grid/diagnosis reads."""
