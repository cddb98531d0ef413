# Two commands on a fresh machine: `make demo` and `make test`. Both create and use .venv.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
# Everything the tests exercise: torch (CPU wheel, pinned), the HF and Lightning integrations,
# plots, TensorBoard export, data audit formats, the orjson fast path, the MCP SDK, pytest + hypothesis.
EXTRAS := torch,hf,lightning,plot,tensorboard,data,fast,mcp,dev

.PHONY: demo test lint bench fuzz clean

$(VENV)/.installed-$(EXTRAS): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -e '.[$(EXTRAS)]'
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed-$(EXTRAS)
	$(PY) -m pip install --disable-pip-version-check -q -e '.[$(EXTRAS),bench]'
	touch $@

demo: $(VENV)/.installed-$(EXTRAS)
	OMP_NUM_THREADS=1 $(PY) -m runwatch demo

# ruff (lint and format) and mypy (strict over the whole package); `make test` runs them first.
lint: $(VENV)/.installed-$(EXTRAS)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Two workers (pytest-xdist); tests sharing a module-scoped fixture (real trainings) stay on one
# worker (tests/conftest.py). TEST_WORKERS=0 runs the suite in this process.
TEST_WORKERS ?= 2
test: lint
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# The long version of the fault and fuzz tests (docs/RELIABILITY.md): 200 SIGKILLs, 5000 examples a
# property, a 2 GiB torn tail, the watchdog following a 10k-records/s writer for a minute.
FUZZ_ENV := RUNWATCH_FUZZ_KILLS=100 RUNWATCH_FUZZ_SIGNALS=50 RUNWATCH_FUZZ_EXAMPLES=5000 \
	RUNWATCH_FUZZ_TORN_MIB=2048 RUNWATCH_FUZZ_LOAD_SECONDS=60
fuzz: $(VENV)/.installed-$(EXTRAS)
	OMP_NUM_THREADS=1 $(FUZZ_ENV) $(PY) -m pytest -q $(wildcard tests/test_*_fuzz.py tests/test_*_faults.py tests/test_*_load.py)

bench: $(VENV)/.installed-bench
	@echo "see benchmarks/README.md for each benchmark's command"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
