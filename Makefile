# One-command entry points. `make run` starts the service on the in-memory store with
# examples/; `make test` installs what the tests need and runs all of them.
SHELL := /bin/bash
.DEFAULT_GOAL := help
NODE_MODULES := node_modules/.package-lock.json
CONFIG ?= examples

.PHONY: help install build run test typecheck lint format format-check validate bench accuracy ghz clean tools

help:
	@echo "make run        start the service (memory store, config from examples/)"
	@echo "make test       install dependencies, lint, typecheck and run every test with coverage"
	@echo "make lint       import boundaries, cycles and correctness (eslint)"
	@echo "make format     format the tree (prettier)     make format-check   list files it would change"
	@echo "make validate CONFIG=path   check a config file or directory"
	@echo "make bench      throughput/latency benchmarks   make accuracy   algorithm accuracy"
	@echo "make ghz        load test with ghz (install ghz first, see README)"

$(NODE_MODULES): package.json package-lock.json
	npm ci --no-audit --no-fund
	@touch $@

install: $(NODE_MODULES)

build: install
	npx tsc -p tsconfig.json

run: build
	CONFIG_PATH=$${CONFIG_PATH:-$(CONFIG)} BACKEND_TYPE=$${BACKEND_TYPE:-memory} LOG_LEVEL=$${LOG_LEVEL:-info} \
	  exec node dist/src/main.js

# Tests start their own redis-server processes, and the benchmarks (also their smoke test) drive
# load with h2load: install Debian's packages when a binary is missing.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
tools:
	@missing=""; \
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null || missing="$$missing redis-server"; \
	command -v h2load >/dev/null || missing="$$missing nghttp2-client"; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

typecheck: install
	npx tsc -p tsconfig.json --noEmit

# eslint.config.js: the import boundaries of src/ (the core imports nothing outward, no cycles) and
# correctness rules; formatting is left to prettier.
lint: install
	npx eslint --max-warnings 0 .

# TypeScript and JavaScript only: YAML fixtures and docs keep their hand-made layout.
PRETTIER_FILES := 'src/**/*.ts' 'test/**/*.ts' 'bench/**/*.ts' '*.js'
format: install
	npx prettier --write $(PRETTIER_FILES)

format-check: install
	npx prettier --check $(PRETTIER_FILES)

# `build` is the typecheck (tsc with noUnusedLocals/noUnusedParameters fails on any error); jest
# then runs every test with coverage, failing under the core's floor (jest.config.js).
test: install tools lint build
	npx jest --ci --coverage

validate: build
	node dist/src/cli.js validate $(CONFIG)

bench: tools build
	node dist/bench/run.js

accuracy: build
	node dist/bench/accuracy.js

ghz: build
	bash test/load/run-ghz.sh

clean:
	rm -rf dist coverage
