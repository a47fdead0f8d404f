# One-command entry points. `make run` starts the service on the in-memory store with
# examples/; `make test` installs what the tests need and runs all of them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
NODE_MODULES := node_modules/.package-lock.json
CONFIG ?= examples

.PHONY: help install build run test typecheck lint format format-check validate bench reservations accuracy ghz clean tools

# Every target carries a `## ` description on its rule line; `make help` lists them all
# (test/integration/makefile.test.ts checks that none is missing).
help: ## list every target
	@echo "usage: make TARGET [CONFIG=path]"
	@awk 'BEGIN { FS = ":.*## " } /^[a-z][a-z-]*:.*## / { printf "  make %-13s %s\n", $$1, $$2 }' $(firstword $(MAKEFILE_LIST))

$(NODE_MODULES): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

install: $(NODE_MODULES) ## install the locked dependencies (npm ci) when package*.json changed

build: install ## compile TypeScript to dist/ (also the typecheck)
	npx tsc -p tsconfig.json

run: build ## start the service: memory store, config from examples/ (CONFIG=path for another)
	CONFIG_PATH=$${CONFIG_PATH:-$(CONFIG)} BACKEND_TYPE=$${BACKEND_TYPE:-memory} LOG_LEVEL=$${LOG_LEVEL:-info} USE_STATSD=$${USE_STATSD:-false} \
	  exec node dist/src/main.js

# Tests start their own redis-server processes, the benchmarks (also their smoke test) drive
# load with h2load, and the live page is tested in a headless chromium: install Debian's packages
# when a binary is missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
tools: ## install redis-server, h2load and chromium from Debian when missing (the tests and benchmarks need them)
	@missing=""; \
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null || missing="$$missing redis-server"; \
	command -v h2load >/dev/null || missing="$$missing nghttp2-client"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

typecheck: install ## typecheck without writing dist/
	npx tsc -p tsconfig.json --noEmit

# eslint.config.js: the import boundaries of src/ (the core imports nothing outward, no cycles) and
# correctness rules; formatting is left to prettier.
lint: install ## import boundaries, cycles and correctness (eslint)
	npx eslint --max-warnings 0 .

# TypeScript and JavaScript only: YAML fixtures and docs keep their hand-made layout.
PRETTIER_FILES := 'src/**/*.ts' 'test/**/*.ts' 'bench/**/*.ts' '*.js'
format: install ## format the tree (prettier)
	npx prettier --write $(PRETTIER_FILES)

format-check: install ## list the files prettier would change
	npx prettier --check $(PRETTIER_FILES)

# `build` is the typecheck (tsc with noUnusedLocals/noUnusedParameters fails on any error); jest
# then runs every test with coverage, failing under the core's floor (jest.config.js). Lint, the
# format check and the build are three single-threaded processes: they run side by side (-j3, each
# one's output kept together), and jest starts only if all three passed.
# --forceExit: a child process a failed test left running must not hold the run open.
# SERIAL_TESTS run first, alone: they kill and promote Redis processes and time the client's
# recovery, or compare latencies and rates with and without a load they add, which other test
# files' load on two cores stretches past any honest deadline.
SERIAL_TESTS := test/integration/store/redis-faults.test.ts test/integration/service/rlqs-sharing.test.ts test/integration/service/leases-bounds.test.ts \
  test/integration/service/rlqs-hostile.test.ts
test: install tools ## install, lint, check formatting, build and run every test with coverage
	@$(MAKE) --no-print-directory -j3 --output-sync=target lint format-check build
	npx jest --ci --forceExit --runInBand $(SERIAL_TESTS)
	npx jest --ci --coverage --forceExit $(foreach t,$(SERIAL_TESTS),--testPathIgnorePatterns=$(t))

validate: build ## check a config file or directory: make validate CONFIG=path
	node dist/src/cli.js validate $(CONFIG)

bench: tools build ## throughput and latency benchmarks (rewrites the README tables)
	node dist/bench/run.js

reservations: tools build ## reservation benchmark: reserve + commit pairs against checks on Redis, and each mode's overspend
	node dist/bench/reservations.js

accuracy: tools build ## algorithm accuracy benchmark, leased limits across two replicas and global limits across three regions on Redis
	node dist/bench/accuracy.js

ghz: build ## load test with ghz, answers split by OK/OVER_LIMIT (install ghz: docs/deploy.md, Load testing with ghz)
	bash test/load/run-ghz.sh

clean: ## remove dist/ and coverage/
	rm -rf dist coverage
