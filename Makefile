# Two commands do everything on a fresh machine (see README.md):
#   make book   create .venv if missing, run every chapter at the cpu preset, build the HTML book
#   make test   create .venv if missing, run the test suite (unit tests, smoke chapters, nbval)
#   make lab    create .venv if missing, open the chapters' notebooks in JupyterLab
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# MNIST: data/ (the two official test files are committed there); set REPLICATE_DATA_DIR to use
# another folder, e.g. one holding torchvision's full training set.
REPLICATE_DATA_DIR ?= $(CURDIR)/data
export REPLICATE_DATA_DIR

.PHONY: book test validate venv lab

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

# JupyterLab on notebooks/ (pinned in pyproject.toml; installed here if an older .venv lacks it).
lab: venv
	$(PY) -m jupyter lab --version >/dev/null 2>&1 || $(PY) -m pip install -q "jupyterlab==4.6.6"
	$(PY) -m jupyter lab --notebook-dir=notebooks
