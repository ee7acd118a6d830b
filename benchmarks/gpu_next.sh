#!/bin/sh
# The GPU measurements of the open issues, in one call on a lent GPU machine; each is bounded
# by its own timeout and writes under $OUT (a run cut short keeps what it wrote).
#
#   OUT=/tmp/gpu GOSSIPFL_DATA=.gpu_data bash benchmarks/gpu_next.sh   # the device tool sets $OUT
#
# The machine is offline: Fashion-MNIST travels as its original IDX files in an ignored
# folder named by GOSSIPFL_DATA (.gpu_data/fashion_mnist/*.gz, 30 MB).
#
# 1. issue 39: a study as one tensor: 8 runs of 20 clients (4 seeds × 2 learning rates),
#    packed (`sweep --pack`) vs one at a time vs 2 processes, the cnn and the 784-200-200-10
#    mlp on Fashion-MNIST (benchmarks/pack.py);
# 2. issue 40: a DP-SGD round against a plain one, and a robust gossip step of every rule
#    against plain W X, on the GPU (benchmarks/dp_round.py, benchmarks/robust_round.py);
# 3. issue 42: 10⁶ logistic clients per round with the client keys derived without
#    Python per client (rng.vectorized_keys), whole `gossipfl run` processes.
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpu.txt" 2>&1
timeout 170 python -m benchmarks.pack --device cuda --model cnn --rounds 10 \
    --out "$OUT/pack_gpu.jsonl" > "$OUT/pack_gpu.log" 2>&1
timeout 80 python -m benchmarks.pack --device cuda --model mlp --rounds 10 \
    --out "$OUT/pack_gpu.jsonl" >> "$OUT/pack_gpu.log" 2>&1
timeout 50 python -m benchmarks.dp_round --device cuda --clients 100 --rounds 3 \
    > "$OUT/trust_gpu.log" 2>&1
timeout 50 python -m benchmarks.robust_round --device cuda --clients 1000 --reps 5 \
    >> "$OUT/trust_gpu.log" 2>&1
timeout 160 python -m benchmarks.scale --device cuda --synthetic --clients 1000000 \
    --topologies epidemic --rounds 3 --out "$OUT/scale_gpu.jsonl" > "$OUT/scale_gpu.log" 2>&1
tail -n 8 "$OUT"/*.log
