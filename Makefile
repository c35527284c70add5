# Two commands set everything up on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export TRITON_INTERPRET ?= 1

.PHONY: demo test venv dry-run-study bench verify clean-results wheelhouse

## venv: the pinned environment (requirements/lock.txt, consistent with pyproject.toml)
venv: $(STAMP)

$(STAMP): requirements/lock.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip==25.3
	$(BIN)/python -m pip install -q -r requirements/lock.txt
	touch $(STAMP)

## demo: run the whole pipeline on the bundled demo suite (CPU is enough)
demo: venv
	$(BIN)/snakemake --cores all

## test: the test suite (CPU; GPU-only tests skip)
test: venv
	$(BIN)/python -m pytest -q -rs

## verify: re-hash every stored artifact and report mismatches
verify: venv
	$(BIN)/snakemake --cores 1 verify_store

## bench: time the demo run and the study-sized dry run (numbers go to bench/NOTES.md by hand)
bench: venv
	$(BIN)/python bench/bench_pipeline.py

clean-results:
	rm -rf results/* .snakemake
