#!/bin/sh
# The GPU measurements this turn prepared and could not take (no GPU was lent): one call on a
# GPU machine measures all of them, each bounded by its own timeout, results under $OUT.
#
#   OUT=/tmp/gpu bash benchmarks/gpu_next.sh          # the device tool sets $OUT
#
# 1. issue 42: 10⁵ and 10⁶ logistic clients per round now that the client keys are derived
#    without Python per client (rng.vectorized_keys; 6.5 s a round at 10⁶ before, host-bound);
# 2. issue 39: a study as one tensor: 8 small cnn runs packed, one at a time and on 2 jobs;
# 3. issue 40: a robust gossip step and a DP-SGD round against plain ones (their CPU ratios
#    are in docs/benchmarks.md).
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONPATH=src
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
timeout 240 python -m benchmarks.scale --device cuda --synthetic --clients 100000 1000000 \
    --topologies epidemic --rounds 3 --out "$OUT/scale_gpu.jsonl" > "$OUT/scale_gpu.log" 2>&1
timeout 180 python -m benchmarks.pack --device cuda --data synthetic --rounds 10 \
    --out "$OUT/pack_gpu.jsonl" > "$OUT/pack_gpu.log" 2>&1
timeout 60 python -m benchmarks.robust_round > "$OUT/robust_round.log" 2>&1
tail -n 5 "$OUT"/*.log
