# Every target creates .venv when missing and installs what it needs, so a
# fresh clone needs only `make demo` or `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test check lint bench clean

# pytest on every core (at most 8 workers: each holds its own CUDA toolchain
# and CPU device).  The whole suite hands out a test file at a time, so that
# the corpus modules' fixtures are built once; the fast loop's files are
# small and uneven, so it hands out tests (22 s instead of 33 s on 2 cores).
PARALLEL := -n auto --maxprocesses 8

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The native stand-ins (libcuda.so.1, libcudart.so.13) are C, built here with the
# machine's cc into gpusafe's cache; gpusafe builds them on first use otherwise.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[samples]'
	$(BIN)/python -m gpusafe.native.build
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/python -m gpusafe.native.build
	touch $(VENV)/.installed $@

demo: $(VENV)/.installed
	$(BIN)/python scripts/demo.py

test: $(VENV)/.installed-test
	$(BIN)/python -m ruff check .
	$(BIN)/python -m pytest -q $(PARALLEL) --dist loadfile

# The fast loop: every unit test, leaving out the corpus, subprocess and
# property tests that tests/conftest.py marks slow.
check: $(VENV)/.installed-test
	$(BIN)/python -m ruff check .
	$(BIN)/python -m pytest -q -m "not slow" $(PARALLEL) --dist load

bench: $(VENV)/.installed-test
	$(BIN)/python bench/parse_speed.py
	$(BIN)/python bench/cpu_device.py
	$(BIN)/python bench/native_overhead.py

clean:
	rm -rf $(VENV)
