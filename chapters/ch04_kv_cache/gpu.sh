#!/usr/bin/env bash
# Chapters 3 and 4 on the GPU, in one call (the lead runs this on the H200):
#   OUT=/some/dir bash chapters/ch04_kv_cache/gpu.sh
# Every script writes its JSON (and plots) to $OUT (results/gpu/ when OUT is unset), in bfloat16.
# The last lines printed are chapter 4's speed-up table.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python}
export OUT=${OUT:-results/gpu}
$PY chapters/ch03_model/03_oracle.py
$PY chapters/ch03_model/06_benchmark_offline.py --runs 3
$PY chapters/ch04_kv_cache/00_kv_memory.py
$PY chapters/ch04_kv_cache/02_proof.py
$PY chapters/ch04_kv_cache/01_step_time.py --lengths 16 128 512 1024 2048 4096 8000
$PY chapters/ch04_kv_cache/03_step_breakdown.py
$PY chapters/ch04_kv_cache/06_benchmark_offline.py --runs 3
