#!/usr/bin/env bash
# The one prepared GPU measurement (issue: fast by default, GPU path), for a machine with CUDA.
# Runs the engine's CUDA-relevant tests, then the throughput benchmark on the GPU for the
# reference CNN, NERO's CNN and a ResNet-18-sized classifier on 224² images; writes the table
# to ${OUT:-benchmarks/results}/orbit_throughput_gpu.txt. Needs the project's .venv (make venv).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
PY=.venv/bin/python
$PY - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device: run this on a GPU machine"
print(torch.__version__, torch.cuda.get_device_name(0), f"{torch.cuda.mem_get_info()[0] / 2**30:.1f} GiB free")
PY
$PY -m pytest -q -p no:cacheprovider tests/test_optimization.py tests/test_pipeline.py \
    tests/test_gpu.py 2>&1 | tail -5
$PY benchmarks/orbit_throughput.py --device cuda --resnet --digits 1000 --naive-digits 20 --rounds 3 \
    --skip-memory --out "$out/orbit_throughput_gpu.txt"
