# Two commands do all the set-up on a fresh machine:
#   make demo   -- create/update .venv, train (or reuse) the demo models, evaluate, plot
#   make test   -- create/update .venv, install the test data, run the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.orbitscope-installed
FASHION_MNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz

.PHONY: demo test test-fast models venv datasets browser photos bench study study-lee clean docs

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# the full torch build with its matching torchvision (torchvision's compiled ops need it; CPU and CUDA)
	$(BIN)/python -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(BIN)/python -m pip install -q -e '.[test]'
	# optional TorchAttacks adapter + PGD baseline; --no-deps: its declared deps would pull a CUDA torch
	$(BIN)/python -m pip install -q --no-deps torchattacks==3.5.1
	# real pretrained detectors that ship inside PyPI packages: MTCNN's P/R/O-Net weights (facenet-pytorch,
	# MIT) and PaddleOCR's PP-OCRv4 text detector and orientation classifier as ONNX (rapidocr-onnxruntime,
	# Apache-2.0); --no-deps: facenet-pytorch pins torch<2.3 and numpy<2, which do not fit ours
	$(BIN)/python -m pip install -q --no-deps facenet-pytorch==2.6.0 rapidocr-onnxruntime==1.4.4
	touch $(STAMP)

venv: $(STAMP)

# Ray for the scale-out tests (a local Ray cluster, loopback only); the demo does not need it
RAY_STAMP := $(VENV)/.orbitscope-ray-installed
$(RAY_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e '.[test,ray]'
	touch $(RAY_STAMP)

# Real Fashion-MNIST IDX files from Debian's dataset-fashion-mnist package (needs root for apt).
datasets:
	@if [ ! -f $(FASHION_MNIST) ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist; \
	  else \
	    echo "note: $(FASHION_MNIST) missing; run 'sudo apt-get install dataset-fashion-mnist' (its tests will be skipped)"; \
	  fi; \
	fi

# Debian's chromium for the browser tests (Playwright drives /usr/bin/chromium; needs root for apt).
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else \
	    echo "note: /usr/bin/chromium missing; run 'sudo apt-get install chromium' (browser tests will be skipped)"; \
	  fi; \
	fi

# Real photos for the detection case study: OpenCV's example data (vtest.avi, messi5.jpg, ...)
# from Debian's opencv-doc (needs root for apt).
OPENCV_EXAMPLES := /usr/share/doc/opencv-doc/examples/data/vtest.avi
photos:
	@if [ ! -f $(OPENCV_EXAMPLES) ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq opencv-doc; \
	  else \
	    echo "note: $(OPENCV_EXAMPLES) missing; run 'sudo apt-get install opencv-doc' (the demo's real photos and their tests will be skipped)"; \
	  fi; \
	fi

# Retrain every model the demo evaluates from its recipe, on an empty store, and ship the files
# with their SHA-256 in src/orbitscope/demos/weights (the demo copies them instead of training).
MODELS_HOME ?= build/demo-models
models: $(STAMP) datasets
	rm -rf $(MODELS_HOME)
	$(BIN)/orbitscope demo-models --home $(MODELS_HOME)

demo: $(STAMP) datasets photos
	$(BIN)/orbitscope demo
	@echo "open the interactive interface on the demo's runs: $(BIN)/orbitscope serve   (then http://127.0.0.1:8050/)"

# two pytest-xdist workers (this machine has 2 cores); loadfile keeps a module on one worker, so
# its module-scoped fixtures (trained models, stores, a Ray cluster) are built once
PYTEST_PARALLEL ?= -n 2 --dist loadfile
test: $(STAMP) $(RAY_STAMP) datasets browser photos docs
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL)

# the documentation site (docs/, mkdocs.yml) into site/; --strict: any warning, broken link or
# unresolved reference fails the build. The reference pages are generated from the code (docs/hooks.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# the edit-test loop: everything but the tests marked slow (browser, Ray, subprocesses, the demo)
test-fast: $(STAMP) $(RAY_STAMP) datasets
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) -m "not slow"

bench: $(STAMP) datasets
	$(BIN)/python benchmarks/orbit_throughput.py

# The ML4ML study shipped in the package: eight families (SmallCNN, a wider SmallCNN, VGG-BN and
# a small ResNet x MNIST subset and Fashion-MNIST, 26 members each, every member assessed for
# rotation, brightness and scale) trained into $(STUDY_HOME) (resumable; about 70 min on 2
# cores), then exported without weights.
STUDY_HOME     ?= study-runs
STUDY_MEMBERS  ?= 26
STUDY_FAMILIES := mnist-small-3 fashion-small-3 mnist-vgg-3 fashion-vgg-3 mnist-resnet-3 fashion-resnet-3 \
                  mnist-wide-3 fashion-wide-3
study: $(STAMP) datasets
	for f in $(STUDY_FAMILIES); do \
	  $(BIN)/orbitscope zoo train --family $$f --n $(STUDY_MEMBERS) --home $(STUDY_HOME) || exit 1; \
	done
	$(BIN)/orbitscope zoo export src/orbitscope/ml4ml/data/ml4ml_study.npz --home $(STUDY_HOME) \
	  $(foreach f,$(STUDY_FAMILIES),--family $(f))

# LEE features of the zoo `make study` built in $(STUDY_HOME) (orbitscope.ml4ml.lee_features; the
# models are read from there), then the assessors on matrices vs LEE vs both
# (benchmarks/ml4ml_lee.py); resumable
study-lee: $(STAMP) datasets
	$(BIN)/orbitscope zoo lee $(STUDY_HOME)/ml4ml_lee.npz --home $(STUDY_HOME) --n $(STUDY_MEMBERS) \
	  $(foreach f,$(STUDY_FAMILIES),--family $(f))
	$(BIN)/python benchmarks/ml4ml_lee.py --home $(STUDY_HOME) --lee $(STUDY_HOME)/ml4ml_lee.npz

clean:
	rm -rf $(VENV) orbitscope-runs demo-output .pytest_cache site

# The fuzz suite of issue 38 (tests/fuzz: every loader and spec parser, each case in a worker under a
# memory cap and a time cap) with its long profile: many random examples per target (make test runs
# it with a few derandomised ones)
.PHONY: fuzz
fuzz: $(STAMP)
	ORBITSCOPE_FUZZ_PROFILE=long $(BIN)/python -m pytest -q tests/fuzz -p no:cacheprovider
