#!/usr/bin/env bash
# Issue 43 item 1 on a lent GPU, one call: the fused walk's Triton form (torch.compile, CUDA).
#   1. tests/backends/test_fused_walk.py's CUDA tests (bit-identity with the reference on the
#      hard groups, rtn, scale-only, hscale, hscale-block, 4over6; the objectives) and the CUDA
#      smoke tests, alone (on 2026-11-28 they ran beside the conformance run and hit their 130 s
#      limit while compiling);
#   2. in the background, `hscale conform --backend torch-cuda` with HSCALE_TORCH_COMPILE=1 (the
#      fused walk for every layer): the certificate of the Triton form, a refusal named in it;
#   3. beside 2, tools/gpu_ondevice_bench.py: eager torch-cuda, the fused walk in blocks of
#      2^17 and 2^20 groups, and cupy, for rtn, hscale, hscale-block at 4096^2, 8192^2, 16384^2 (every
#      result checked), one profiled hscale call of each path at 8192^2.
# On CUDA the walk is compiled in each process (torch_aot.jit); its caches in $HSCALE_CACHE_DIR.
# A refusal of the fused walk names the block or its probe, the output, the row and group: grep
# the logs for "differ from the eager pipeline".
# Run from the repository root on the GPU machine: bash tools/gpu_fused_session.sh
OUT=${OUT:-/tmp/gpu-fused-out}; mkdir -p "$OUT"
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 CI=true HSCALE_CACHE_DIR=/tmp/hscale-cache
t0=$(date +%s)
step() { echo "== $(( $(date +%s) - t0 )) s: $*"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; nproc
  command -v gcc g++ nvcc
  python3 -c "import sys,numpy,torch,triton,cupy,ml_dtypes,hypothesis,pytest; print(sys.version.split()[0], 'numpy',numpy.__version__,'torch',torch.__version__,'cuda',torch.version.cuda,'triton',triton.__version__,'cupy',cupy.__version__,'ml_dtypes',ml_dtypes.__version__,'hypothesis',hypothesis.__version__,'pytest',pytest.__version__)"
} > "$OUT/machine.log" 2>&1
cat "$OUT/machine.log"
. tools/gpu_install_kit.sh

step "the fused walk's CUDA tests and the CUDA smoke tests"
timeout 240 python3 -m pytest tests/backends/test_fused_walk.py -k cuda \
  tests/backends/test_backends_smoke.py -q -p no:cacheprovider -rs > "$OUT/tests.log" 2>&1
echo "exit $?" >> "$OUT/tests.log"; tail -8 "$OUT/tests.log"

step "the certificate of the fused walk's CUDA form (background) and the bench"
(HSCALE_TORCH_COMPILE=1 timeout 290 python3 -m hscale conform --backend torch-cuda \
   --certificate "$OUT/conformance-torch-cuda-fused.json" > "$OUT/conform.log" 2>&1
 echo "exit $? after $(( $(date +%s) - t0 )) s" >> "$OUT/conform.log") &

timeout 170 python3 tools/gpu_ondevice_bench.py --sizes 4096,8192,16384 \
  --methods rtn,hscale,hscale-block --check-rows 128 --repeat 3 --compiled 131072,1048576 \
  --profile 8192 --json "$OUT/fused.json" > "$OUT/bench.log" 2>&1
echo "exit $?" >> "$OUT/bench.log"
grep -v "^\s*$" "$OUT/bench.log" | grep -v "^-\|Name \|Self CPU\|^ *aten::\|^ *cuda" | head -60
wait
step "done"
tail -5 "$OUT/conform.log"
