# Mallard — the front door. A newcomer needs two commands: `make demo` and `make test`.
# Each part keeps its own build and tests in its folder; this file only wires them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
BUILD ?= build
VENV ?= .venv
PY := $(VENV)/bin/python
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo -G Ninja)
ARGS ?=

.PHONY: help setup deps python allocator workloads test test-allocator test-allocator-arm64 \
        workloads-arm64 peers-arm64 runner-arm64 \
        test-runner test-api test-stats test-wire test-dashboards test-k8s test-docs test-scripts lint demo bench \
        bench-allocator bench-transfer bench-runner bench-layouts bench-verdicts bench-repeats bench-api up down \
        images-offline e2e clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s$$'\t'

setup: deps python ## install everything the demo and the tests need

deps: ## system packages (compilers, hyperfine, valgrind, peers, qemu, prometheus) via apt
	@scripts/install-deps.sh

python: $(VENV)/.synced ## the Python workspace (.venv) via uv
$(VENV)/.synced: pyproject.toml api/pyproject.toml runner/pyproject.toml stats/pyproject.toml \
                 wire/pyproject.toml
	@scripts/install-python.sh
	@touch $@

allocator: ## build libmallard.so into build/allocator
	@cmake -S allocator -B $(BUILD)/allocator $(GEN) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD)/allocator

workloads: ## build the benchmark workloads into build/workloads
	@cmake -S runner/workloads -B $(BUILD)/workloads $(GEN) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD)/workloads

workloads-arm64: ## the workloads cross-built for arm64 into build/workloads-aarch64
	@cmake -S runner/workloads -B $(BUILD)/workloads-aarch64 $(GEN) -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_TOOLCHAIN_FILE=$(CURDIR)/allocator/cmake/aarch64-linux-gnu.cmake >/dev/null
	@cmake --build $(BUILD)/workloads-aarch64

peers-arm64: ## arm64 jemalloc/mimalloc/tcmalloc extracted (never installed) into build/peers-aarch64
	@scripts/arm64-peers.sh

runner-arm64: python workloads-arm64 peers-arm64 ## an arm64 runner agent under qemu (MALLARD_RUNNER_API, _TOKEN, _CPUS, _NAME)
	@MALLARD_RUNNER_ARCH=aarch64 $(VENV)/bin/mallard-runner agent $(ARGS)

test: setup ## every test of every part; prints each runner's summary line
	@scripts/test-all.sh

test-allocator: allocator ## allocator conformance, stress, TSan, real programs (ctest)
	@ctest --test-dir $(BUILD)/allocator --output-on-failure

test-allocator-arm64: ## allocator cross-built for arm64 and run under qemu-aarch64
	@allocator/scripts/test-arm64.sh

test-runner: python allocator workloads ## workloads, executor, CLI, agent (pytest)
	@$(VENV)/bin/pytest runner/tests

test-api: python ## API and database against a real PostgreSQL (pytest)
	@$(VENV)/bin/pytest api/tests

test-stats: python ## the statistics package: verdict rule, power, change points (pytest)
	@$(VENV)/bin/pytest stats/tests

test-wire: python ## the wire package: field types, refs, repository URLs (pytest)
	@$(VENV)/bin/pytest wire/tests

test-dashboards: python ## dashboard SQL, PromQL, promtool, amtool (pytest)
	@$(VENV)/bin/pytest dashboards/tests

test-k8s: python ## kustomize render, schema validation, checkov (pytest)
	@$(VENV)/bin/pytest k8s/tests

test-docs: python ## every relative link and #anchor of every tracked *.md resolves; README line budgets (pytest)
	@$(VENV)/bin/pytest tests/docs

test-scripts: python ## the repository's own scripts: the function-length check, install-deps.sh (pytest)
	@$(VENV)/bin/pytest scripts/tests

lint: python ## ruff, mypy, and no product function over 60 lines
	@$(VENV)/bin/ruff check api runner stats wire dashboards k8s scripts tests allocator
	@$(VENV)/bin/mypy api/mallard_api runner/mallard_runner stats/mallard_stats wire/mallard_wire
	@$(PY) scripts/check_function_length.py

SCENARIO ?=
demo: setup allocator workloads ## the whole pipeline on this machine (ARGS=--keep leaves it running; SCENARIO=push: 8 commits pushed, the culprit bisected; SCENARIO=transfer-cache: mutex vs ring vs naive, micro 1..64 threads and macro; SCENARIO=allocators: mimalloc and jemalloc releases compared, 8 mimalloc commits pushed)
	@$(PY) scripts/$(if $(SCENARIO),demo_$(subst -,_,$(SCENARIO)),demo).py $(ARGS)

bench: bench-allocator bench-runner bench-verdicts bench-api ## every benchmark

bench-allocator: setup allocator workloads ## allocator vs peers on both suites: the standard one (mimalloc-bench, 5 rounds, ~50 min) and Mallard's own (full + transfer + redis, 12 rounds, ~18 min), each cell with the API's verdict (one table per suite in allocator/README.md; ARGS="--cpus 0,1 --suite standard|mallard --quick")
	@$(PY) runner/bench/allocators.py $(ARGS)

bench-transfer: setup allocator workloads ## the transfer cache's micro tier: mutex vs ring vs naive at threads 1..64 (ARGS=--scaling) and over threads x batch x size (--grid) (tables in allocator/README.md)
	@$(PY) runner/bench/transfer.py $(ARGS)

bench-runner: setup allocator workloads ## measurement noise: CV and A/A check (runner/README.md)
	@$(PY) runner/bench/noise.py $(ARGS)

bench-layouts: setup allocator workloads ## the layout effect per workload: spread within one layout vs between layouts, ASLR on (table in docs/statistics.md; ARGS="--suite full --first-params")
	@$(PY) runner/bench/layouts.py $(ARGS)

bench-verdicts: setup allocator workloads ## a calibration through the real API and runner: false alarms, canary detection (runner/README.md; ARGS=--quick)
	@$(PY) runner/bench/verdicts.py $(ARGS)

bench-repeats: setup allocator workloads ## the demo's comparison run 5 times against one API: unknown share, 1-thread MDEs, flips of decided cells (docs/statistics.md; ARGS="--repeats N --no-peers")
	@$(PY) runner/bench/repeats.py $(ARGS)

bench-api: python ## ingest throughput and series-query latency (api/README.md)
	@$(PY) api/bench/bench_api.py $(ARGS)

up: ## docker compose stack (prints the URLs)
	@scripts/compose.sh up

down: ## stop the compose stack
	@scripts/compose.sh down

images-offline: ## build postgres/prometheus/alertmanager stand-ins from debian:bookworm-slim
	@scripts/images-offline.sh

e2e: ## container end-to-end test (needs a Docker engine)
	@scripts/e2e.sh

clean: ## remove builds and local state
	rm -rf $(BUILD) .mallard
