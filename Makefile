# Every target installs what it needs itself, so a fresh clone needs only `make demo` / `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test demo lint bench fuzz clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/pytest -q -n 2 --dist loadfile

demo: $(STAMP)
	@mkdir -p build
	$(BIN)/qtool quantize fixtures/models/cnn.tflite --data fixtures/data/cnn_calib.npz -o build/cnn_int8.tflite --report build/cnn_int8.report.json --force
	$(BIN)/qtool check build/cnn_int8.tflite
	@echo "report: build/cnn_int8.report.json (qtool inspect build/cnn_int8.tflite shows the model)"

lint: $(STAMP)
	$(BIN)/ruff check qtool tests fixtures bench
	$(BIN)/ruff format --check qtool tests fixtures bench

$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/pip install --quiet -e ".[dev,bench]"
	touch $@

# Bytecode first: an editable install never compiles it, and where PYTHONDONTWRITEBYTECODE is
# set (this sandbox) every `qtool` run would compile qtool again (70 ms of each quantize timed).
bench: $(VENV)/.bench-installed
	$(BIN)/python -m compileall -q qtool
	$(BIN)/python -m bench

# The long robustness campaign (README "Robustness"): >= 10,000 mutated models, bad data, output
# paths, signals. The MediaPipe models are fetched once (pip download); offline, fixtures only.
fuzz: $(STAMP)
	-$(BIN)/python -c "from bench.real_models import fetch_models; fetch_models()"
	$(BIN)/python -m tests.fuzz

clean:
	rm -rf $(VENV) build .pytest_cache
