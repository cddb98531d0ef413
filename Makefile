# Two commands on a fresh machine: `make demo` and `make test`. Both create and use .venv.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
# Everything the tests exercise: torch (CPU wheel, pinned), the HF and Lightning integrations,
# plots, TensorBoard export, data audit formats, the orjson fast path, pytest + hypothesis.
EXTRAS := torch,hf,lightning,plot,tensorboard,data,fast,dev

.PHONY: demo test bench fuzz clean

$(VENV)/.installed-$(EXTRAS): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -e '.[$(EXTRAS)]'
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed-$(EXTRAS)
	$(PY) -m pip install --disable-pip-version-check -q -e '.[$(EXTRAS),bench]'
	touch $@

demo: $(VENV)/.installed-$(EXTRAS)
	OMP_NUM_THREADS=1 $(PY) -m runwatch demo

test: $(VENV)/.installed-$(EXTRAS)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q

bench: $(VENV)/.installed-bench
	@echo "see benchmarks/README.md for each benchmark's command"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
