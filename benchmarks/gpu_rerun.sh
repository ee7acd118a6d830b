#!/bin/sh
# The second GPU call of 2026-11-27 (after benchmarks/gpu_next.sh): DP-SGD with the accountant's
# package carried as wheels (.whl: dp-accounting, dm-tree), and packing measured over more
# rounds so that the sweep's start-up does not hide the rounds.
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=src:/tmp/site PYTHONUNBUFFERED=1
timeout 60 python -m benchmarks.dp_round --device cuda --clients 100 --rounds 3 \
    > "$OUT/dp_gpu.log" 2>&1
timeout 150 python -m benchmarks.pack --device cuda --model cnn --rounds 40 \
    --modes packed alone --out "$OUT/pack_gpu40.jsonl" > "$OUT/pack_gpu40.log" 2>&1
timeout 100 python -m benchmarks.pack --device cuda --model mlp --rounds 40 \
    --modes packed alone --out "$OUT/pack_gpu40.jsonl" >> "$OUT/pack_gpu40.log" 2>&1
tail -n 12 "$OUT"/*.log
