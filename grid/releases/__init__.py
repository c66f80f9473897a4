"""What grid knows of SGLang's releases, below every engine and the twin: the catalog of each release's server
options, HTTP routes and metric names (catalog/), the flag that spells each setting per release (flags.py) and the
combinations SGLang refuses at launch, with the hardware its kernels need (checks.py ``RULES``)."""
