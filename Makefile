# Ceiling: two commands on a fresh machine.
#   make demo   install everything, start Redis (if none answers), web + worker + beat, seed, print URL + login
#   make test   install everything and run the whole suite
# Other targets: setup, stop, status, bench-*, clean.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
export PATH := $(abspath $(BIN)):$(PATH)
# llama-cpp-python compiles llama.cpp when pip installs it: a portable x86-64 build (AVX2/FMA/F16C,
# no host-specific extensions such as AVX-512) so the wheel pip caches runs on any such CPU.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF

.PHONY: demo test setup system stop status clean check bench-redaction

setup: system $(VENV)/.installed node_modules/.installed

# OS packages the node needs (numactl for pinning). Installed with apt when missing and we are root.
system:
	@bash scripts/system-deps.sh

$(VENV)/.installed: requirements.txt requirements-dev.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U pip
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	@touch $@

# The tiny random-weight GGUF model the local-llamacpp example serves: generated, never downloaded
# (manage.py make_tiny_gguf is idempotent, so a re-run only checks the file).
TINY_GGUF := var/models/tiny-random.gguf
$(TINY_GGUF): $(VENV)/.installed deployments/engines/tiny_gguf.py
	$(PY) manage.py make_tiny_gguf
demo test: $(TINY_GGUF)

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

demo: setup
	@bash scripts/ensure-redis.sh
	$(PY) manage.py migrate --noinput -v 0
	$(PY) manage.py seed
	@$(PY) scripts/services.py start
	$(PY) manage.py demo

# Two pytest-xdist workers: the suite waits on real processes and sockets as much as it computes, so
# two workers finish it in about a third of the time on a 2-core machine; worksteal lets a worker that
# ran out take tests queued on the other (with the default scheduling one sat idle for the last minutes).
# `make test PYTEST_ARGS=` runs it in one process; other pytest options go there too
# (`PYTEST_ARGS="-n 2 -k sweep"`).
# --durations=30: the slowest tests are listed at the end of every run, so a suite that grows slower
# says where.
PYTEST_ARGS ?= -n 2 --dist worksteal --durations=30

test: setup
	@bash scripts/ensure-redis.sh
	$(PY) -m pytest $(PYTEST_ARGS)

check: setup
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run

# A running `make demo` first (it would go on deploying), then the deployments, whether or not the
# agent runs: undeploy asks the agent, and where none is running (stopped, or crashed) it stops this
# host's engines itself. Skipped only where the services were never started here (no var/run).
stop:
	@if [ -d "$${CEILING_VAR_DIR:-var}/run" ] && [ -x $(PY) ]; then $(PY) scripts/services.py stop-demo; fi
	@if [ -d "$${CEILING_VAR_DIR:-var}/run" ] && [ -x $(PY) ]; then $(PY) manage.py undeploy --wait 30; fi
	@$(PY) scripts/services.py stop

status:
	@$(PY) scripts/services.py status

# Secret redaction of a 1 MB log tail, ms per MB, next to the straightforward implementation.
bench-redaction: $(VENV)/.installed
	@$(PY) controlplane/scripts/redaction_bench.py

clean: stop
	rm -rf $(VENV) node_modules staticfiles var
