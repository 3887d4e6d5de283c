# Each target sets up its own virtual environment, so both commands work on a fresh machine.
# TORCH pins the CPU wheel these machines provide; GPU users can run `make TORCH=torch test` or keep their own build.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
PYTEST_ARGS ?= -n 2

# The GPU check runs with the GPU machine's own python3 (its CUDA PyTorch), not with the virtual environment;
# GPU_CHECK_ARGS="--budget 600" keeps it within 10 minutes (benchmarks/gpu_check.py: the stages, most important first).
GPU_PYTHON ?= python3
GPU_CHECK_ARGS ?=
# A wheel bundle for a GPU machine without a package index (air-gapped clusters): `make wheels` on a machine with one
# downloads what the project needs besides PyTorch, for CPython 3.12 on x86-64, into wheels/; gpu-check installs it.
WHEELS := kornia==0.9.0 kornia_rs==0.2.0 lion-pytorch==0.2.5
WHEEL_PLATFORMS := --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
	--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64

.PHONY: setup test test-fast durations audit notebooks clean gpu-check wheels

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

test: setup
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MPLBACKEND=Agg $(PY) -m pytest $(PYTEST_ARGS)

# while developing: every test recorded in tests/durations.json at or under tests/conftest.py's SLOW_SECONDS (the
# others are marked slow); CI runs `make test`
test-fast: setup
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MPLBACKEND=Agg $(PY) -m pytest $(PYTEST_ARGS) -m "not slow"

# the whole suite as CI runs it (the ci hypothesis profile, an empty audit cache), recording every test's duration in
# tests/durations.json, from which tests/conftest.py marks the slow ones; re-record after adding tests and commit it
durations: setup
	CI=1 CRATE_WHITEBOX_CACHE=$$(mktemp -d) OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MPLBACKEND=Agg \
		$(PY) -m pytest $(PYTEST_ARGS) -q --record-durations tests/durations.json

audit: setup
	MPLBACKEND=Agg $(PY) -m verify

# the notebooks executed, with their outputs and figures, as notebooks/html/*.html
notebooks: setup
	$(PY) -m notebooks.run

gpu-check:
	$(GPU_PYTHON) -m benchmarks.gpu_check $(GPU_CHECK_ARGS)

wheels:
	python3 -m pip download --no-deps --only-binary=:all: $(WHEEL_PLATFORMS) -d wheels $(WHEELS)

# The audit's cache of trained runs: verify.experiments.root(), i.e. verify.context.cache_dir()/verify (the same
# environment variables, an empty one counting as unset); clean deletes that folder only.
AUDIT_CACHE := $(or $(CRATE_WHITEBOX_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/crate-whitebox)/verify

clean:
	rm -rf $(VENV) verify-report .pytest_cache .hypothesis
	rm -rf "$(AUDIT_CACHE)"
