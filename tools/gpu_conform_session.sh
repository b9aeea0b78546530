#!/usr/bin/env bash
# Issue 33 item 4 on a lent GPU, one shot: the landed suite (main) through hscale conform on both
# CUDA backends, the GPTQ factor's torch-cuda tests and the CUDA smoke tests, and the Hypothesis
# tests under the thorough profile, all in parallel, each under its own timeout.
OUT=${OUT:-/tmp/gpu-conform-out}; mkdir -p "$OUT"
# Run from the repository root on the GPU machine: bash tools/gpu_conform_session.sh
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 CI=true
t0=$(date +%s)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
  git log --oneline -1 2>/dev/null || true
  python3 -c "import sys,numpy,torch,cupy,ml_dtypes,hypothesis,pytest,transformers; print(sys.version.split()[0], 'numpy',numpy.__version__,'torch',torch.__version__,'cuda',torch.version.cuda,'cupy',cupy.__version__,'ml_dtypes',ml_dtypes.__version__,'hypothesis',hypothesis.__version__,'pytest',pytest.__version__,'transformers',transformers.__version__)"
} > "$OUT/machine.log" 2>&1
. tools/gpu_install_kit.sh
for b in torch-cuda cupy; do
  (timeout 300 python3 -m hscale conform --backend $b --certificate "$OUT/conformance-$b.json" \
     > "$OUT/conform-$b.log" 2>&1; echo "exit $? after $(( $(date +%s) - t0 )) s" >> "$OUT/conform-$b.log") &
done
(timeout 200 python3 -m pytest tests/backends/test_gptq_backends.py tests/backends/test_backends_smoke.py -q -p no:cacheprovider -rs \
   > "$OUT/gptq_smoke.log" 2>&1; echo "exit $? after $(( $(date +%s) - t0 )) s" >> "$OUT/gptq_smoke.log") &
python3 -m pytest conformance/test_hypothesis.py --backend cupy --backend torch-cuda --collect-only -q \
   -p no:cacheprovider 2>/dev/null | grep '::' > /tmp/thorough.ids
mkdir -p /tmp/th
timeout 310 xargs -P 8 -I{} bash -c 'id="$1"; log=/tmp/th/$(echo "$id" | md5sum | cut -c1-12);
  timeout 290 python3 -m pytest "$id" --backend cupy --backend torch-cuda --hypothesis-profile thorough \
    -p no:cacheprovider -q --conformance-report "$log.json" > "$log.log" 2>&1;
  echo "$id | exit $? | $(tail -1 "$log.log")"' _ {} < /tmp/thorough.ids > "$OUT/thorough.log" 2>&1
cat /tmp/th/*.log | grep -E "^(FAILED|ERROR)|Falsifying|Error" | head -40 >> "$OUT/thorough.log"
wait
echo "total $(( $(date +%s) - t0 )) s" >> "$OUT/machine.log"
for f in "$OUT"/conform-*.log "$OUT"/gptq_smoke.log; do echo "== $f"; tail -6 "$f"; done
echo "== thorough"; cat "$OUT/thorough.log" | cut -c1-200
