# Every target creates .venv and installs the project when needed, so a fresh
# machine needs nothing but `make <target>`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test lint clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(PY) -m ruff check step_lang step_hw sim rtl_tests tests examples bench
	$(PY) -m ruff format --check step_lang step_hw sim rtl_tests tests examples bench

clean:
	rm -rf build sim_build .pytest_cache .hypothesis
