#!/usr/bin/env bash
# Coordinator's last GPU call of 2026-11-26 (issue 33): from the repository root (main, merged).
# 1. the torch-cuda rtn blocks of 37a6a45 timed alone (bench, 8192^2); 2. side by side: hscale
# conform on torch-cuda and cupy (every kind they declare), the CUDA cases of the backend tests,
# and ModelOpt's local_hessian spread over MiniLM's subsets (.gpu33-mo, PARTS=minilm-spread).
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 CI=true
R=/tmp/r; mkdir -p $R/conform $R/mo; t0=$(date +%s); ROOT=$PWD
# the merged tree (integration, `git archive`) travels as .gpu33/int.tar.gz beside .gpu33-mo
mkdir -p /tmp/kit && tar -xzf .gpu33/int.tar.gz -C /tmp/kit && cd /tmp/kit || exit 3
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; echo "tree: integration $(cat $ROOT/.gpu33/COMMIT)"; } > $R/machine.log 2>&1
OUT=$R . tools/gpu_install_kit.sh
timeout 70 python3 tools/gpu_ondevice_bench.py --sizes 8192 --methods rtn,hscale --check-rows 128 --repeat 3 > $R/bench.log 2>&1
echo "bench exit $? after $(( $(date +%s) - t0 )) s" >> $R/machine.log
(cd $ROOT/.gpu33-mo && OUT=$R/mo PARTS=minilm-spread PART_TIMEOUT=190 bash session.sh > $R/mo/session.log 2>&1) &
for b in torch-cuda cupy; do
  (timeout 210 python3 -m hscale conform --backend $b --certificate "$R/conform/conformance-$b.json" \
     > "$R/conform/conform-$b.log" 2>&1; echo "exit $? after $(( $(date +%s) - t0 )) s" >> "$R/conform/conform-$b.log") &
done
(timeout 190 python3 -m pytest tests/backends/test_gptq_backends.py tests/backends/test_backends_smoke.py tests/backends/test_backends_tensor.py -q -p no:cacheprovider -rs \
   > $R/conform/backend_tests.log 2>&1; echo "exit $? after $(( $(date +%s) - t0 )) s" >> $R/conform/backend_tests.log) &
wait
echo "total $(( $(date +%s) - t0 )) s" >> $R/machine.log
cp $R/machine.log $R/bench.log $OUT/; tar czf $OUT/conform.tar.gz -C $R conform; tar czf $OUT/modelopt.tar.gz -C $R mo
cat $R/machine.log; tail -4 $R/bench.log; for f in $R/conform/*.log; do echo "== $f"; tail -4 $f; done; echo "== mo"; tail -5 $R/mo/session.log; ls $R/mo
