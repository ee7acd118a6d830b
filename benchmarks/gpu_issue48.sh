#!/bin/sh
# Issue 48 on a lent GPU, in one call (about 8 minutes at most): the compiled training path
# and CUDA graphs timed against the eager path (benchmarks/gpu_compile.py: mlp, cnn, the
# paper-scale ResNet-18-GN in TF32 and bf16, the same-numbers check, a profile of the compiled
# step), then the CUDA tests (tests/test_compiled.py, tests/test_precision.py). Synthetic data
# only (the machine is offline); each step bounded by its own timeout; raw output under $OUT.
#
#   OUT=/tmp/gpu sh benchmarks/gpu_issue48.sh      # the device tool sets $OUT
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONPATH=src:. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/device.txt" 2>&1
timeout 330 python -m benchmarks.gpu_compile --out "$OUT/gpu_compile.jsonl" --budget 270 \
    > "$OUT/gpu_compile.log" 2>&1
echo "gpu_compile rc=$?" >> "$OUT/gpu_compile.log"
timeout 130 python -m pytest -q -p no:cacheprovider -p no:xdist -W ignore -rs -m "not slow" \
    tests/test_compiled.py tests/test_precision.py > "$OUT/pytest_cuda.log" 2>&1
echo "pytest rc=$?" >> "$OUT/pytest_cuda.log"
grep -h '"rounds"\|same_numbers\|error' "$OUT/gpu_compile.jsonl" | cut -c1-400
tail -n 6 "$OUT/pytest_cuda.log"
