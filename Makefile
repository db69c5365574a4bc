# acl-core: one command to set up and run the main job, one to set up and pass the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
BACKEND ?=

.PHONY: run test lint bench clean

$(VENV)/.installed-%: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -e ".[$*]"
	touch $@

## run: set up .venv and prove the default backend against the reference (quick conformance)
run: $(VENV)/.installed-tools
	$(BIN)/acl-core backends
	$(BIN)/acl-core conformance $(BACKEND) --quick

## test: set up .venv with the dev tools, then lint, type-check and run the test suite
test: $(VENV)/.installed-dev lint
	$(BIN)/python -m pytest -n 2 -q

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy acl_core backends conformance tools

## bench: host-overhead and throughput benchmarks of the reference backend beside raw NumPy (JSON and PNG)
bench: $(VENV)/.installed-tools
	$(BIN)/acl-core bench --backend reference

clean:
	rm -rf $(VENV) reports build *.egg-info
