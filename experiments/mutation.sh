#!/usr/bin/env bash
# Mutation testing of grid's pure core with mutmut (configuration: [tool.mutmut] in pyproject.toml).
#
#   pip install -e '.[dev,mutation]' && experiments/mutation.sh            # every module, one after the other
#   experiments/mutation.sh grid.diagnosis.rules                           # one module
#   MUTATION_WORKERS=2 experiments/mutation.sh                             # more parallel mutants (default 1)
#
# Each module runs on its own (mutmut runs, for each mutant, only the configured fast unit tests that call the
# mutated function); the table of scores per module is printed at the end (experiments/mutation_score.py) and the
# surviving mutants are listed with `mutmut results`; docs/mutation.md explains the ones that are equivalent.
# Not part of CI: 5-15 minutes on 2 cores. Results land in mutants/ (git-ignored); it is removed first unless
# MUTATION_KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."

MODULES=("grid.metrics.loadpoint" "grid.metrics.request" "grid.sweep.space" "grid.report.select"
         "grid.diagnosis.rules" "grid.loadgen.arrivals" "grid.server.probe")
# the probe's pure part only: run_probe/_post/probe send HTTP requests (covered by the twin server tests)
declare -A PATTERNS=(["grid.server.probe"]="grid.server.probe.x_judge* grid.server.probe.x_contains_answer* grid.server.probe.x__tokens*")

if [ "$#" -gt 0 ]; then MODULES=("$@"); fi
[ "${MUTATION_KEEP:-0}" = 1 ] || rm -rf mutants
for module in "${MODULES[@]}"; do
    echo "=== $module"
    # shellcheck disable=SC2086
    mutmut run --max-children "${MUTATION_WORKERS:-1}" ${PATTERNS[$module]:-"$module.*"} | tail -n 3
done
python experiments/mutation_score.py "${MODULES[@]}"
