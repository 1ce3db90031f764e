# Every target installs what it needs itself, so a fresh clone needs only `make demo` / `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install compiler browser test demo lint docs espeak corpus smoke honesty ortvenv peer bench fuzz clean

$(STAMP): pyproject.toml qtool/calibrate/_observe.c $(wildcard qtool/runtime/kernels/_native*.[ch]) | compiler
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# qtool's one C file (qtool/calibrate/_observe.c, calibration's observers in one pass) needs a C
# compiler and Python's headers; the build goes on without them (numpy passes instead), but a
# machine without them gets Debian's gcc and python3-dev here, as `browser` gets chromium.
compiler:
	@if ! command -v cc >/dev/null || ! $(PYTHON) -c "import os, sys, sysconfig; \
	  sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"; then \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  echo "installing Debian's gcc and python3-dev for qtool's C extension"; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends gcc python3-dev >/dev/null; \
	fi

# The HTML page's tests open it in Debian's chromium (tests/report/test_browser.py): a machine
# without it gets it here, as root or through sudo, the way .venv is made when missing.
browser:
	@if ! command -v chromium >/dev/null; then \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  echo "installing Debian's chromium for the page tests"; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	fi
	@command -v chromium >/dev/null

test: $(STAMP) browser
	$(BIN)/pytest -q -n 2 --dist loadfile

demo: $(STAMP)
	@mkdir -p build
	$(BIN)/qtool quantize fixtures/models/cnn.tflite --data fixtures/data/cnn_calib.npz -o build/cnn_int8.tflite --report build/cnn_int8.report.json --force
	$(BIN)/qtool check build/cnn_int8.tflite
	@echo "report: build/cnn_int8.report.json (qtool inspect build/cnn_int8.tflite shows the model)"

lint: $(STAMP)
	$(BIN)/ruff check qtool tests fixtures bench docs
	$(BIN)/ruff format --check qtool tests fixtures bench docs

# The generated pages of docs/ (rules.md, ops.md), from the rule catalogue and schemas/; the
# tests fail when they are not current (tests/docs/test_generated.py).
docs: $(STAMP)
	$(BIN)/python -m docs.generate

$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/pip install --quiet -e ".[dev,bench]"
	touch $@

# The wider real-model corpus (bench/README.md): models from PyPI wheels, Keras models trained in
# a TensorFlow venv of their own, espeak-ng speech. Cached under $QTOOL_BENCH_CACHE (default
# build/), so several checkouts can share one download and one training.
BENCH_CACHE := $(or $(QTOOL_BENCH_CACHE),build)
TF_VENV := $(BENCH_CACHE)/tfvenv

$(TF_VENV)/.installed: bench/tf-requirements.txt
	$(PYTHON) -m venv $(TF_VENV)
	$(TF_VENV)/bin/pip install --quiet --upgrade pip
	$(TF_VENV)/bin/pip install --quiet -r bench/tf-requirements.txt
	touch $@

# Debian's espeak-ng speaks the corpus's audio, installed when missing as `browser` does.
espeak:
	@if ! command -v espeak-ng >/dev/null; then \
	  sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"; \
	  echo "installing Debian's espeak-ng for the audio corpus"; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends espeak-ng >/dev/null; \
	fi
	@command -v espeak-ng >/dev/null

corpus: $(VENV)/.bench-installed $(TF_VENV)/.installed espeak
	$(BIN)/python -m bench.corpus

# qtool's command line on every corpus model (slow: up to 10 minutes a run, three runs a model).
smoke: corpus
	$(BIN)/python -m compileall -q qtool
	$(BIN)/python -m bench.smoke --out build/corpus_status.md

# What qtool says against what it delivers, on every corpus model (bench/honesty.py).
honesty: corpus
	$(BIN)/python -m bench.honesty --json build/honesty.json

# Bytecode first: an editable install never compiles it, and where PYTHONDONTWRITEBYTECODE is
# set (this sandbox) every `qtool` run would compile qtool again (70 ms of each quantize timed).
# ai-edge-quantizer, the weight modes' peer in bench/modes.py: a venv of its own (it pins
# ai-edge-litert), never a test dependency.
AEQ_VENV := build/aeqvenv

$(AEQ_VENV)/.installed: bench/aeq-requirements.txt
	$(PYTHON) -m venv $(AEQ_VENV)
	$(AEQ_VENV)/bin/pip install --quiet --upgrade pip
	$(AEQ_VENV)/bin/pip install --quiet -r bench/aeq-requirements.txt
	touch $@

# ONNX Runtime's static quantizer, the accuracy peer (bench/ort_peer.py): TensorFlow (tf2onnx
# imports it), tf2onnx, onnx, onnxruntime and LiteRT in a venv of their own beside the
# TensorFlow one; qtool is read from the checkout. `make peer` compares qtool's default with each
# ORT calibrator on the 13 MediaPipe models, judged on held-out photographs, and writes the
# numbers where bench/accuracy.py reads ORT's column.
ORT_VENV := $(BENCH_CACHE)/ortvenv

$(ORT_VENV)/.installed: bench/ort-requirements.txt
	$(PYTHON) -m venv $(ORT_VENV)
	$(ORT_VENV)/bin/pip install --quiet --upgrade pip
	$(ORT_VENV)/bin/pip install --quiet -r bench/ort-requirements.txt
	touch $@

ortvenv: $(ORT_VENV)/.installed

peer: $(ORT_VENV)/.installed
	$(ORT_VENV)/bin/python -m bench.real_models
	$(ORT_VENV)/bin/python -m bench.ort_peer --all --json $(BENCH_CACHE)/real_models/ort.json

bench: $(VENV)/.bench-installed corpus $(AEQ_VENV)/.installed peer
	$(BIN)/python -m compileall -q qtool
	$(BIN)/python -m bench

# The long robustness campaign (docs/robustness.md): >= 10,000 mutated models, bad data, output
# paths, signals. The MediaPipe models are fetched once (pip download); offline, fixtures only.
fuzz: $(STAMP)
	-$(BIN)/python -c "from bench.real_models import fetch_models; fetch_models()"
	$(BIN)/python -m tests.fuzz

clean:
	rm -rf $(VENV) build .pytest_cache
