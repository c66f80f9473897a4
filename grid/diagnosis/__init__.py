"""What limits each load point's throughput, from the evidence recorded with it (grid/diagnosis/rules.py)."""
