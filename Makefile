# Two commands do everything on a fresh machine (see README.md):
#   make book   create .venv if missing, run every chapter at the cpu preset, build the HTML book
#   make test   create .venv if missing, run the test suite (unit tests, smoke chapters, nbval)
#   make lab    create .venv if missing, open the chapters' notebooks in JupyterLab
# `make venv` also installs MathJax for node into typeset/ (where npm exists), so that the build
# typesets the math and the pages load no MathJax; without npm the pages typeset it themselves.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# MNIST: data/ (the two official test files are committed there); set REPLICATE_DATA_DIR to use
# another folder, e.g. one holding torchvision's full training set.
REPLICATE_DATA_DIR ?= $(CURDIR)/data
export REPLICATE_DATA_DIR

.PHONY: book test validate venv lab

TYPESET := typeset/node_modules/.package-lock.json

venv: $(VENV)/.installed $(TYPESET)

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -e ".[test]"
	# torchattacks: the peer PGD and APGD are tested and timed against; its requests~=2.25.1 pin
	# conflicts with Sphinx's, so it goes in without its dependencies (it needs only torch).
	$(PY) -m pip install -q --no-deps torchattacks==3.5.1
	touch $@

$(TYPESET): typeset/package.json typeset/package-lock.json
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix typeset --no-audit --no-fund --loglevel=error; \
	else echo "npm not found: the book's pages will typeset their math in the browser (apt-get install nodejs npm)"; fi

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
