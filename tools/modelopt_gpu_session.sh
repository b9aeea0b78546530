#!/usr/bin/env bash
# Issue 33 item 5 on a lent GPU, one shot: ModelOpt's three NVFP4 calibrators through ModelOpt's
# own code (tools/modelopt_fidelity.py measure) on MiniLM and the three tiny decoder families,
# the five parts side by side, each under its own timeout. To $OUT: modelopt-gpu.json (the parts
# merged), machine.log, and parts.tar.gz (each part's JSON and log).
# Run from a folder holding the kit's tree (tree.tar.xz: hscale, reference, backends,
# conformance, vectors, tools/modelopt_fidelity.py, the ModelOpt tests), the wheels the GPU
# machine lacks (whl/: nvidia-modelopt 0.47.0 and what it imports that the image lacks) and
# MiniLM (minilm.zip, from `python tools/modelopt_fidelity.py pack-minilm`): bash session.sh
# Assembled here (the GPU machine has no network; 64 MiB travel in all), in a folder D:
#   git archive HEAD | tar -x -C T && (cd T && tar -cJf D/tree.tar.xz hscale reference backends \
#     conformance vectors/*.py vectors/data pyproject.toml tools/modelopt_fidelity.py tests/conftest.py \
#     tests/interop/test_modelopt_calibrators.py) && cp tools/modelopt_gpu_session.sh D/session.sh
#   python tools/modelopt_fidelity.py pack-minilm D/minilm.zip                      # 40 MB
#   pip download --no-deps --only-binary=:all: --python-version 3.12 ... -d D/whl \
#     nvidia-modelopt==0.47.0 pydantic pydantic-core annotated-types typing-inspection \
#     typing-extensions omegaconf "pulp<4"    # pulp: drop its solverdir/cbc for other platforms
# STAND_IN=--stand-in proves the plumbing without a GPU (the kit's RTN instead of ModelOpt);
# SUBSETS=N runs N calibration subsets instead of the report's 5; PARTS="minilm-spread" runs
# only the parts named; WORK is the scratch folder.
OUT=${OUT:-/tmp/modelopt-gpu-out}; W=${WORK:-/tmp/mo33}; P="$W/out"; mkdir -p "$OUT" "$W/tree" "$P"
set -u
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 OMP_NUM_THREADS=4 MKL_NUM_THREADS=4
t0=$(date +%s)
tar -xJf tree.tar.xz -C "$W/tree"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$W/site" whl/*.whl > "$OUT/machine.log" 2>&1 || { cat "$OUT/machine.log"; exit 3; }
# the kit by links (its import namespace is hscale; the top-level folders are sub-packages)
mkdir -p "$W/kit/hscale"; for f in "$W"/tree/hscale/*; do ln -sfn "$f" "$W/kit/hscale/"; done
for s in reference backends vectors conformance; do ln -sfn "$W/tree/$s" "$W/kit/hscale/$s"; done
export PYTHONPATH="$W/kit:$W/site"
python3 "$W/tree/tools/modelopt_fidelity.py" unpack-minilm minilm.zip "$W/minilm"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc
  python3 -c "import sys,numpy,torch,triton,transformers,modelopt; print(sys.version.split()[0], 'numpy',numpy.__version__,'torch',torch.__version__,'cuda',torch.version.cuda,'triton',triton.__version__,'transformers',transformers.__version__,'modelopt',modelopt.__version__, 'cuda available', torch.cuda.is_available())"
  python3 -c "from hscale.backends.interop import modelopt_calibrators as c; print('available:', c.available('local_hessian'))"
  echo "set up in $(( $(date +%s) - t0 )) s"
} >> "$OUT/machine.log" 2>&1
for part in ${PARTS:-minilm minilm-spread Llama Qwen3 Qwen3-MoE}; do
  extra=""; case $part in minilm*) extra="--model-dir $W/minilm";; esac
  (timeout "${PART_TIMEOUT:-230}" python3 "$W/tree/tools/modelopt_fidelity.py" measure "$part" \
     "$P/$part.json" $extra ${SUBSETS:+--subsets $SUBSETS} ${STAND_IN:-} > "$P/$part.log" 2>&1
   echo "exit $? after $(( $(date +%s) - t0 )) s" >> "$P/$part.log") &
done
# the adapter's own tests, which skip without CUDA and Triton
# (run from $W: from the tree's own folder, tree/hscale would shadow the kit's links)
(cd "$W" && timeout "${PART_TIMEOUT:-230}" python3 -m pytest tree/tests/interop/test_modelopt_calibrators.py \
   -q -p no:cacheprovider -rs > "$P/calibrator-tests.log" 2>&1
 echo "exit $? after $(( $(date +%s) - t0 )) s" >> "$P/calibrator-tests.log") &
wait
echo "total $(( $(date +%s) - t0 )) s" >> "$OUT/machine.log"
python3 "$W/tree/tools/modelopt_fidelity.py" merge "$OUT/modelopt-gpu.json" "$P"/*.json \
  >> "$OUT/machine.log" 2>&1
tar -czf "$OUT/parts.tar.gz" -C "$P" .
cat "$OUT/machine.log"
for part in minilm minilm-spread Llama Qwen3 Qwen3-MoE calibrator-tests; do
  echo "== $part"; tail -4 "$P/$part.log"; done
