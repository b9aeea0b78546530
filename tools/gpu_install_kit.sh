# Sourced by the GPU session scripts (tools/gpu_*_session.sh), from the kit's root on the GPU
# machine: the kit installed without its dependencies (the machine's image has them and no
# network), else as a tree of links on PYTHONPATH; how, appended to "$OUT/machine.log".
if ! python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . > /tmp/pip.log 2>&1; then
  mkdir -p /tmp/tree/hscale; for f in hscale/*; do ln -sfn "$PWD/$f" /tmp/tree/hscale/; done
  for s in reference backends vectors conformance docs; do ln -sfn "$PWD/$s" /tmp/tree/hscale/$s; done
  export PYTHONPATH=/tmp/tree; echo "installed by links (pip: $(tail -1 /tmp/pip.log))" >> "$OUT/machine.log"
fi
