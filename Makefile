# Two commands do everything on a fresh machine (see README.md):
#   make book   create .venv if missing, run every chapter at the cpu preset, build the HTML book
#   make test   create .venv if missing, run the test suite (unit tests, smoke chapters, nbval)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# MNIST: data/ when it holds mnist/, else the project's shared folder beside the checkout.
REPLICATE_DATA_DIR ?= $(if $(wildcard data/mnist),$(CURDIR)/data,$(abspath $(CURDIR)/../shared/data))
export REPLICATE_DATA_DIR

.PHONY: book test validate venv

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[test]"
	touch $@

book: venv
	$(PY) -m replicate run --preset cpu
	$(PY) -m replicate build

test: venv
	TQDM_DISABLE=1 $(PY) -m pytest

validate: venv
	$(PY) -m replicate validate
