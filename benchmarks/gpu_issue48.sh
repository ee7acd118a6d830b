#!/bin/sh
# Issue 48 on a lent GPU, in one call (at most 9.5 minutes: 380 + 35 + 65 + 90 s): the compiled
# training path and CUDA graphs timed against the eager path (benchmarks/gpu_compile.py: the
# paper-scale ResNet-18-GN in TF32 and bf16 first, the compiled step's profile next, then the
# cnn and the mlp, the same-numbers check), a packed study of 8 mlp runs against one run at a
# time (benchmarks/pack.py, 10 and 40 rounds, synthetic); then the CUDA tests
# (tests/engine/test_compiled.py, tests/engine/test_precision.py) and, with ACCURACY=1 and
# Fashion-MNIST travelling with the tree, the cnn's accuracy in bf16 against fp32 (3 seeds,
# 20 rounds; measured 2026-11-28: benchmarks/results/gpu_h200_20261128), side by side since
# nothing is timed there. Each step bounded by its own timeout; raw output under $OUT.
#
#   OUT=/tmp/gpu sh benchmarks/gpu_issue48.sh      # the device tool sets $OUT
#
# The machine is offline: Fashion-MNIST travels as its original IDX files in an ignored folder
# (.gpu_data/fashion_mnist/*.gz, 30 MB; carry .gpu_data), found through GOSSIPFL_DATA.
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONPATH=src:. PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv \
    > "$OUT/device.txt" 2>&1
python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
    >> "$OUT/device.txt" 2>&1
timeout 380 python -m benchmarks.gpu_compile --out "$OUT/gpu_compile.jsonl" --budget 330 \
    > "$OUT/gpu_compile.log" 2>&1
echo "gpu_compile rc=$?" >> "$OUT/gpu_compile.log"
for rounds in 10 40; do
    timeout $((25 + rounds)) python -m benchmarks.pack --device cuda --model mlp \
        --data synthetic --rounds $rounds --modes packed alone --out "$OUT/pack_gpu.jsonl" \
        >> "$OUT/pack_gpu.log" 2>&1
    echo "pack $rounds rc=$?" >> "$OUT/pack_gpu.log"
done
(timeout 90 python -m pytest -q -p no:cacheprovider -p no:xdist -W ignore -rs -m "not slow" \
    tests/engine/test_compiled.py tests/engine/test_precision.py > "$OUT/pytest_cuda.log" 2>&1
    echo "pytest rc=$?" >> "$OUT/pytest_cuda.log") &
if [ "${ACCURACY:-0}" = 1 ] && [ -d .gpu_data ]; then
    export GOSSIPFL_DATA=$PWD/.gpu_data
    for precision in fp32 bf16; do for seed in 0 1 2; do
        (timeout 70 python -m gossipfl run --set device=cuda --set model.name=cnn \
            --set engine.precision=$precision --set seed=$seed --set train.rounds=20 \
            --set output.dir=/tmp/acc_runs/$precision$seed 2>&1 | grep -i "accuracy" \
            | sed "s/^/$precision seed $seed: /" > /tmp/acc_$precision$seed.log) &
    done; done
fi
wait
cat /tmp/acc_*.log > "$OUT/bf16_accuracy.log" 2>/dev/null
grep -h '"rounds"\|same_numbers\|error' "$OUT/gpu_compile.jsonl" | cut -c1-400
tail -n 8 "$OUT/pytest_cuda.log" "$OUT/pack_gpu.log" "$OUT/bf16_accuracy.log" 2>/dev/null
