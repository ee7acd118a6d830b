#!/bin/sh
# The GPU check of issue 38's refactor (config.py the schema, gossipfl.assembly.loading the checks;
# mixing rules registered): the CUDA tests that skip on a CPU machine, a Fashion-MNIST run on
# cuda through the CLI, and the equation tests of the topologies and plugins on this machine.
# Carry .gpu_data (Fashion-MNIST IDX) and .whl (dp-accounting, dm-tree; pytest in .whl/test).
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl .whl/test/*.whl > "$OUT/pip.log" 2>&1 || cat "$OUT/pip.log"
export PYTHONPATH=src:/tmp/site:. PYTHONUNBUFFERED=1 GOSSIPFL_DATA=.gpu_data
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$OUT/device.txt" 2>&1
timeout 240 python -m pytest -q -p no:cacheprovider -p no:xdist -W ignore -rs \
    tests/engine/test_precision.py tests/compression/test_compressors.py tests/assembly/test_plugins.py \
    tests/test_import_layers.py tests/topology/test_topology.py > "$OUT/pytest_cuda.log" 2>&1
echo "pytest rc=$?" >> "$OUT/pytest_cuda.log"
timeout 120 python -m gossipfl run --set device=cuda --set train.rounds=3 \
    --set topology.mixing=max_degree --set output.dir="$OUT/runs" > "$OUT/run_cuda.log" 2>&1
echo "run rc=$?" >> "$OUT/run_cuda.log"
tail -n 8 "$OUT/device.txt" "$OUT/pytest_cuda.log" "$OUT/run_cuda.log"
