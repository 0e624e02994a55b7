#!/bin/bash
# On the lent GPU machine (the device tool: run with carry [".gpu"], after tools/device/pack.sh here):
#   bash tools/device/run.sh [JOBS]
# Unpacks the wheels, installs SepTran in place (no network: --no-index, no dependencies), prints the machine,
# then runs make gpu's two halves: the GPU tests (pytest -m gpu on JOBS workers) with the GPU benchmarks' builds
# overlapped, then bench/gpu.py alone. Everything worth keeping lands in $OUT (the tool brings it back).
export PYTHONUNBUFFERED=1
t0=$(date +%s)
mkdir -p /tmp/site && python3 -c "import tarfile; tarfile.open('.gpu/site.tar.xz').extractall('/tmp/site')" || exit 3
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv
python3 -c "import torch, tilelang, optuna, septran; from septran.target import detect_target
print('torch', torch.__version__, 'tilelang', tilelang.__version__, torch.cuda.get_device_name(), 'target', detect_target())"
echo "set-up: $(( $(date +%s) - t0 )) s"
export SEPTRAN_CACHE_DIR=/tmp/c/s TILELANG_CACHE_DIR=/tmp/c/t SEPTRAN_GPU_REPORT=${OUT:-/tmp}/gpu_cases.jsonl
python3 bench/gpu.py --build-only > "${OUT:-/tmp}/bench_build.log" 2>&1 &
builds=$!
python3 -m pytest -q -n "${1:-12}" --max-worker-restart 0 -m gpu -rs --durations=10 tests 2>&1 | tee "${OUT:-/tmp}/tests.log" | tail -30
echo "tests: rc ${PIPESTATUS[0]} at $(( $(date +%s) - t0 )) s"
wait $builds
python3 bench/gpu.py 2>&1 | tee "${OUT:-/tmp}/bench.log"
echo "bench: rc ${PIPESTATUS[0]} at $(( $(date +%s) - t0 )) s"
cp bench/results/*sm*.json "${OUT:-/tmp}/" 2>/dev/null
