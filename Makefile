# Each target sets up its own virtual environment, so both commands work on a fresh machine.
# TORCH pins the CPU wheel these machines provide; GPU users can run `make TORCH=torch test` or keep their own build.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
PYTEST_ARGS ?= -n 2

.PHONY: setup test audit clean

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH)"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

test: setup
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MPLBACKEND=Agg $(PY) -m pytest $(PYTEST_ARGS)

audit: setup
	MPLBACKEND=Agg $(PY) -m verify

clean:
	rm -rf $(VENV) verify-report .pytest_cache .hypothesis
