#!/bin/bash
# On a lent GPU machine (the device tool: run with carry [".gpu"], after tools/device/pack.sh here), its host CPU:
#   bash tools/device/cpu.sh [CASES]
#   LEAVES=gemm_f32,gemm_bf16 bash tools/device/cpu.sh gemm,bmm   # also bench/gemm_leaves.py over those cases first
# The host of the H100 machines lent so far is an Intel Xeon with AMX (family 6 model 207, 16 vCPUs of a shared VM),
# the CPU family no session's own machine has been: this prints the CPU, runs the bf16 units' native tests
# (tests/test_cpu_bf16_units.py, tests/test_cpu_bf16_keep.py: skipped where the CPU lacks a unit) and the MKL leaf's
# (tests/test_cpu_mkl_leaf.py) and the vendor library's (tests/test_cpu_vendor.py: the few-row and AVX512-BF16
# kernels), with LEAVES bench/gemm_leaves.py (every GEMM leaf against torch), then
# bench/cpu.py at 2 and 1 threads over CASES (default: every case; inductor beside the row operators and
# attention). Everything worth keeping lands in $OUT. About 5 minutes with every case.
export PYTHONUNBUFFERED=1
t0=$(date +%s)
lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|L1d|L2|L3'
grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(amx_tile|amx_bf16|avx512_bf16|avx512_fp16|avx512f)$' | tr '\n' ' '
echo
mkdir -p /tmp/site && python3 -c "import tarfile; tarfile.open('.gpu/site.tar.xz').extractall('/tmp/site')" || exit 3
export PYTHONPATH=/tmp/site:$PWD
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . 2>&1 | tail -2
mkdir -p /tmp/c && : > /tmp/c/empty.jsonl
export SEPTRAN_CACHE_DIR=/tmp/c/s TILELANG_CACHE_DIR=/tmp/c/t SEPTRAN_TUNING_DB=/tmp/c/empty.jsonl
echo "set-up: $(( $(date +%s) - t0 )) s"
timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider -rs tests/test_cpu_bf16_units.py tests/test_cpu_bf16_keep.py \
  tests/test_cpu_mkl_leaf.py tests/test_cpu_vendor.py \
  2>&1 | grep -v Warning | tail -6 | tee "${OUT:-/tmp}/bf16_tests.log"
echo "tests: at $(( $(date +%s) - t0 )) s"
if [ -n "$LEAVES" ]; then
  timeout 240 python3 bench/gemm_leaves.py --threads 2,1 --rounds 5 --cases "$LEAVES" --json "${OUT:-/tmp}/leaves.json" \
    2>&1 | tee "${OUT:-/tmp}/leaves.log" | grep -v Warning
  echo "leaves: at $(( $(date +%s) - t0 )) s"
fi
cases=${1:-gemm,decode,bmm,gemm_epilogue,bf16,fp16,softmax,log_softmax,layernorm,rmsnorm,rows16,rows_odd,attention,overhead}
left=$(( ${BUDGET:-520} - ($(date +%s) - t0) ))  # BUDGET: seconds for the whole script; the bench gets what is left
timeout $left python3 bench/cpu.py --threads 2,1 --rounds ${ROUNDS:-7} --cases "$cases" \
  --inductor softmax,log_softmax,layernorm,rmsnorm,rows16,rows_odd,attention --json "${OUT:-/tmp}/cpu.json" > "${OUT:-/tmp}/bench.log" 2>&1
echo "bench: rc $? at $(( $(date +%s) - t0 )) s"
grep -A80 '^operator' "${OUT:-/tmp}/bench.log" | head -80
