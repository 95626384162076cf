# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv on first use
# (`make venv` creates it alone).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo test quick lint bench gpu-wheels clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

venv: $(STAMP)

# Writes to $FDO_HOME if set, else ./.fdo-demo (never to the default data root, ~/.fdo).
# `make demo DAYS=4`: the longer story, a night of the loop after each simulated day.
demo: $(STAMP)
	$(BIN)/python -m pipelines.demo $(if $(DAYS),--days $(DAYS))

# Two test files at a time (a file's tests share its fixtures), the longest first as
# tests/conftest.py orders them; what CI runs.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

# The pure-logic tests: no XLA compile, no process started, no browser, none slow.
quick: $(STAMP)
	$(BIN)/python -m pytest -q -m "not (slow or xla or subprocess or browser)"

# The type checker over the production packages, then the linter and import order
# (configuration: pyproject.toml's [tool.mypy] and [tool.ruff]); what CI runs before the tests.
lint: $(STAMP)
	$(BIN)/mypy
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_hook.py
	$(BIN)/python benchmarks/bench_fingerprint.py
	$(BIN)/python benchmarks/bench_evaluate.py
	$(BIN)/python benchmarks/bench_search_quality.py --workloads cnn-s,mlp-s,rnn-s
	$(BIN)/python benchmarks/bench_ingest_scale.py

# The wheels a lent GPU machine lacks for benchmarks/gpu_check.py (docs/gpu.md), for its Python
# 3.12 on x86-64, into .whl/ (git-ignored; carried to the machine by the device tool).
gpu-wheels:
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
	  --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
	  -d .whl zstandard==0.25.0 tqdm==4.70.1

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .fdo-demo .fdo-quickstart
