# icmlbook: `make test` is the whole suite (what .ci/run calls); `make book` builds the HTML book.
PYTHON      ?= python3
VENV        ?= .venv
TORCH_SPEC  ?= torch==2.13.0
JOBS        ?= 2
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.installed
CH          ?=

export PYTHONHASHSEED := 0
# Jupyter kernels from this .venv win over a user-wide "python3" kernelspec.
export JUPYTER_PREFER_ENV_PATH := 1

.PHONY: venv test test-fast lint book execute execute-all lab browser-deps bench clean help

help:
	@echo "make test           set up .venv, run the whole test suite"
	@echo "make test-fast      the fast lane: no training, kernels or book build (< 1 min)"
	@echo "make book           set up .venv, execute every chapter (default tier), build _build/html"
	@echo "make execute CH=05  re-execute one chapter in place at the default tier"
	@echo "make lab            JupyterLab on book/: chapters' .py open as notebooks (labconfig/)"
	@echo "make browser-deps   Debian's chromium for the browser tests (root; what .ci/run does)"
	@echo "make bench          time every chapter at smoke and default tiers against the budgets"

venv: $(STAMP)

# Torch first, from TORCH_SPEC (the CPU build on this machine), so that the project's
# own `torch>=2.2,<3` is already satisfied and pip never pulls a CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[book,dev]"
	touch $(STAMP)

# One pytest run: library and chapter unit tests, structure, papermill smoke runs,
# the CLI, the HTML book build, and nbval re-running every committed notebook.
test: venv
	ICMLBOOK_HEADLESS=1 $(BIN)/python -m pytest -n $(JOBS) --dist loadscope \
		--nbval-lax --nbval-cell-timeout=600 tests book

# The fast lane (under a minute on 2 cores): library and CLI tests, structure, and the
# chapters' unit tests that need no training fixture; no kernels, no book build.
test-fast: venv
	ICMLBOOK_HEADLESS=1 $(BIN)/python -m pytest -n $(JOBS) -q \
		-m "not slow and not smoke and not book and not browser" tests

lint: venv
	$(BIN)/ruff check icmlbook tests
	$(BIN)/ruff check --select E501 book

execute: venv
	@test -n "$(CH)" || (echo "usage: make execute CH=05" && exit 2)
	$(BIN)/icmlbook run $(CH) --tier default --seed 0 --inplace

execute-all: venv
	$(BIN)/icmlbook run --all --tier default --seed 0 --inplace --jobs $(JOBS)

book: venv execute-all
	$(BIN)/jupyter-book build . -W -n --keep-going

# labconfig/overrides.json: chapters' .py open as notebooks (jupytext), no news popup.
lab: venv
	$(BIN)/jupyter lab --notebook-dir=book --LabApp.app_settings_dir=$(CURDIR)/labconfig

# tests/test_browser.py drives Debian's chromium through Playwright for Python (in the
# dev extra), launched by path: `playwright install` and its downloads are never used.
browser-deps:
	command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium)

bench: venv
	$(BIN)/icmlbook bench --all --out bench.md

clean:
	rm -rf _build .pytest_cache bench.md
