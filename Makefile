# gossipfl: two commands do all set-up on a fresh Debian/Ubuntu machine with Python >= 3.11.
#
#   make run    virtual environment + gossipfl + Fashion-MNIST, then the quickstart experiment
#   make test   virtual environment + gossipfl (+ test tools), Fashion-MNIST when it can be
#               had (the tests that need it skip otherwise), then the fast tier of the tests
#               (minutes: every module, every equation test; -m "not slow")
#   make test-all   the same set-up, then every test, in parallel (what CI runs)
#   make docs   the documentation site in site/ (MkDocs, strict: a broken link is an error)
#
# Both are idempotent: stamp files in .venv/ record what is done, so a second call reuses it.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMPS := $(VENV)/.stamps
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test test-all setup data lint help docs docs-serve

help:
	@echo "make run    set up, fetch Fashion-MNIST, run the quickstart (gossipfl run)"
	@echo "make test   set up, run the fast tier of the tests (minutes)"
	@echo "make test-all   set up, run every test in parallel (CI)"
	@echo "make data   fetch Fashion-MNIST only"
	@echo "make lint   ruff check"
	@echo "make docs   build the documentation site into site/ (strict)"

run: setup data
	$(VENV)/bin/gossipfl run

# The real-data tests use Fashion-MNIST when it can be had; they skip when it cannot.
# Tiers (tests/conftest.py): `make test` leaves out the tests marked slow; `make test-all`
# runs every test, spread over the cores by pytest-xdist (JOBS=N to choose).
JOBS ?= auto
test: setup
	-@$(MAKE) --no-print-directory data
	$(PY) -m pytest -n $(JOBS) -m "not slow"

test-all: setup
	-@$(MAKE) --no-print-directory data
	$(PY) -m pytest -n $(JOBS)

setup: $(STAMPS)/installed

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first (the CPU wheel where the index has it), then gossipfl with its dev tools.
$(STAMPS)/installed: pyproject.toml | $(PY)
	@mkdir -p $(STAMPS)
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install "torch==2.13.0" \
		|| $(PIP) install "torch>=2.2,<3"
	$(PIP) install -e ".[dev]"
	@touch $@

# Fashion-MNIST: already there, else the Debian package (when apt is usable: root or sudo),
# else the official download with SHA-256 checks; a clear message when none works.
data: $(STAMPS)/fashion-mnist

$(STAMPS)/fashion-mnist: $(STAMPS)/installed
	@if $(VENV)/bin/gossipfl fetch fashion_mnist --no-download >/dev/null 2>&1; then \
		echo "Fashion-MNIST: found."; \
	elif command -v apt-get >/dev/null && { [ -z "$(SUDO)" ] || sudo -n true 2>/dev/null; } \
		&& { $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y dataset-fashion-mnist \
		  || { $(SUDO) apt-get update && $(SUDO) env DEBIAN_FRONTEND=noninteractive \
		       apt-get install -y dataset-fashion-mnist; }; } \
		&& $(VENV)/bin/gossipfl fetch fashion_mnist --no-download; then \
		echo "Fashion-MNIST: installed the Debian package dataset-fashion-mnist."; \
	elif $(VENV)/bin/gossipfl fetch fashion_mnist; then \
		echo "Fashion-MNIST: downloaded (checksums verified)."; \
	else \
		echo "Could not obtain Fashion-MNIST: apt is not usable and the download failed." >&2; \
		echo "Install the Debian package dataset-fashion-mnist, or put the four files" >&2; \
		echo "(train-images-idx3-ubyte.gz, ...) in ~/.cache/gossipfl/data/fashion_mnist/." >&2; \
		exit 1; \
	fi
	@touch $@

lint: setup
	$(VENV)/bin/ruff check src tests

# The documentation site: MkDocs + Material + mkdocstrings from the "docs" extra, the algorithm
# reference generated from the registry (docs/hooks/algorithms.py), MathJax for the equations
# copied from its npm package (the site is read offline: no CDN). --strict turns every broken
# link, anchor or reference into an error.
MATHJAX_VERSION := 3.2.2
MATHJAX := docs/javascripts/vendor/mathjax/tex-svg-full.js

docs: $(STAMPS)/docs $(MATHJAX)
	NO_MKDOCS_2_WARNING=1 PYTHONPATH=src $(VENV)/bin/mkdocs build --strict

docs-serve: $(STAMPS)/docs $(MATHJAX)
	NO_MKDOCS_2_WARNING=1 PYTHONPATH=src $(VENV)/bin/mkdocs serve

$(STAMPS)/docs: pyproject.toml $(STAMPS)/installed
	$(PIP) install -e ".[dev,docs]"
	@touch $@

# One 2.2 MB file of the npm package (TeX input, SVG output, every TeX extension, no fonts).
$(MATHJAX):
	@command -v npm >/dev/null || { echo "make docs needs npm (apt-get install npm) to fetch MathJax." >&2; exit 1; }
	@mkdir -p $(VENV)/npm $(dir $@)
	cd $(VENV)/npm && npm pack --silent mathjax@$(MATHJAX_VERSION) >/dev/null \
		&& tar -xzf mathjax-$(MATHJAX_VERSION).tgz package/es5/tex-svg-full.js package/LICENSE
	cp $(VENV)/npm/package/es5/tex-svg-full.js $(VENV)/npm/package/LICENSE $(dir $@)
