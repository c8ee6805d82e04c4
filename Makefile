# Two entry points: `make demo` (build example checkpoints, audit one) and `make test` (ruff, then pytest on both
# cores of the 2-core CI box: pytest-xdist, -n 2).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-quick setup

setup: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.14.1 torchvision==0.29.1
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/build_checkpoints.py --out examples/out
	$(BIN)/auditor scan examples/out/resnet18.pt --json audit-report.json --html audit-report.html; \
	  code=$$?; echo "auditor exit code: $$code (0 pass: risk factors listed, nothing measured fails; 1 fail)"; test $$code -le 1

test: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m pytest -q -n 2

# While editing: the same without the tests marked slow (fresh venvs, jail payload runs, trained attacks); CI and
# `make test` run them all.
test-quick: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m pytest -q -n 2 -m "not slow"
