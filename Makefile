# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv as needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test soak bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test,postgres]"
	touch $@

demo: $(VENV)/.installed
	$(PY) examples/demo.py

test: $(VENV)/.installed
	$(PY) -m pytest

# The crash and concurrency suites for longer (thousands of kill points); figures are printed.
soak: $(VENV)/.installed
	MEMORY_MCP_SOAK=1 $(PY) -m pytest -s tests/test_crash.py tests/test_concurrency.py

bench: $(VENV)/.installed
	$(PY) bench/bench_startup.py
	$(PY) bench/bench_store.py
	$(PY) bench/bench_updater.py
	$(PY) bench/locomo_recall.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
