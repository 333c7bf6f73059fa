PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-unit test-integration test-acceptance lint format clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m runlane_sqs.local.demo

# Test files are shared between TEST_WORKERS processes (pytest-xdist), each with its own
# moto server; one file's tests stay in one process, and the files that start fleets of
# processes (tests/processes/test_*.py) all in one (tests/conftest.py). TEST_WORKERS=0
# runs them in this one.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

test: $(STAMP)
	$(BIN)/python -m pytest tests --ignore=tests/browser $(XDIST)

# The console in a real Chromium (Debian's, installed here when missing: browser
# downloads do not work offline) driven by Playwright; docs/console.md.
# RUNLANE_CONSOLE_SCREENSHOTS=docs/console refreshes the docs' screenshots.
BROWSER_STAMP := $(VENV)/.browser-installed
.PHONY: test-console
$(BROWSER_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[dev,browser]"
	command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; }
	touch $(BROWSER_STAMP)

test-console: $(BROWSER_STAMP)
	$(BIN)/python -m pytest tests/browser

# Groups (tests/conftest.py): test-unit runs everything that needs no emulator,
# test-integration everything that does, test-acceptance the CLI as a user drives it.
test-unit: $(STAMP)
	$(BIN)/python -m pytest tests -m "not integration" --ignore=tests/browser $(XDIST)

test-integration: $(STAMP)
	$(BIN)/python -m pytest tests -m integration --ignore=tests/browser $(XDIST)

test-acceptance: $(STAMP)
	$(BIN)/python -m pytest tests/processes/cli

# The modules one plain run passes through and the switches between them, in memory
# (tools/run_path.py; docs/design/architecture.md). tests/core/test_run_path.py holds
# them to their bounds.
.PHONY: run-path
run-path: $(STAMP)
	$(BIN)/python tools/run_path.py --list

# tests/typing holds what mypy must accept and refuse of typed tasks (docs/typed-tasks.md).
lint: $(STAMP)
	$(BIN)/ruff check runlane_sqs maintenance tests bench chaos simulation tools
	$(BIN)/ruff format --check runlane_sqs maintenance tests bench chaos simulation tools
	$(BIN)/mypy
	$(BIN)/mypy tests/typing
	$(BIN)/lint-imports
	$(BIN)/cfn-lint infra/*.yaml
	$(BIN)/hadolint Dockerfile
	$(BIN)/python tools/check_names.py runlane_sqs

format: $(STAMP)
	$(BIN)/ruff check --fix runlane_sqs maintenance tests bench chaos simulation tools
	$(BIN)/ruff format runlane_sqs maintenance tests bench chaos simulation tools

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# Every test that talks to an emulator, against Amazon DynamoDB Local + LocalStack SQS
# instead of moto (no Docker): installs both into .tools/ once; each of TEST_WORKERS
# processes starts a pair of its own, runs its share of the files, stops them
# (TEST_WORKERS=0: one pair, started around the whole run). The CLI tests keep their own
# moto server and are left out. See docs/local-localstack.md.
.PHONY: test-aws-local
test-aws-local: $(STAMP)
	bash localstack/install-emulators.sh
	$(if $(filter 0,$(TEST_WORKERS)),$(BIN)/python -m tests.aws_local run --,RUNLANE_TEST_BACKEND=aws-local) \
		$(BIN)/python -m pytest tests -m integration --ignore=tests/processes/cli \
		--ignore=tests/browser $(XDIST) $(PYTEST_ARGS)

# Benchmarks (not part of `make test`): cost per run, throughput against Celery on the
# same SQS endpoint, maintenance scaling, latency and worker memory; results go to
# bench/results/. `make bench ARGS="--backend aws-local"` runs on DynamoDB Local +
# LocalStack SQS. `make bench-smoke` runs the same code with tiny sizes (CI).
# See docs/performance.md#benchmarks.
BENCH_STAMP := $(VENV)/.bench-installed

.PHONY: bench bench-smoke
$(BENCH_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[dev,async,bench]"
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	@case " $(ARGS) " in *aws-local*) bash localstack/install-emulators.sh ;; esac
	$(BIN)/python -m bench $(ARGS)

bench-smoke: $(BENCH_STAMP)
	@case " $(ARGS) " in *aws-local*) bash localstack/install-emulators.sh ;; esac
	$(BIN)/python -m bench --smoke $(ARGS)

# The whole system's seeded simulation (simulation/; docs/reliability.md, "The
# simulation"): `make simulate` runs CI's seeds (a fixed set, then fresh ones it prints);
# SEED=17 replays one seed exactly; SEEDS=10000 runs seeds 1..10000; ARGS passes the rest
# (`--mutant lease-fence`, `--shrink`, `--runs 200`, ...). Exits 1 on a broken invariant.
.PHONY: simulate
simulate: $(STAMP)
	$(BIN)/python -m simulation $(if $(SEED),--seed $(SEED)) $(if $(SEEDS),--seeds $(SEEDS)) $(ARGS)

# The chaos suite (not part of `make test`): real sync and async worker processes and
# maintenance on DynamoDB Local (file-backed) + LocalStack SQS, 1,000 runs, while workers
# are SIGKILLed and frozen, wakeups are duplicated, forged and purged, and a proxy
# throttles, fails and drops DynamoDB responses; DynamoDB Local is restarted once.
# 15 % of the triggers fan out: parents that ctx.map over 3-5 children two at a time, and
# app.group(..., then=...) callbacks, in turn succeeding, failing, tolerating failed
# children and retried with retry-failed. Prints one figure line, writes chaos/results/,
# exits 1 on any lost, stuck or doubly succeeded run, or a group not joined exactly once
# (its children once each, its parent resumed once) or not ending as its mode says. `make chaos-smoke` is the same at
# 60 runs with fewer faults (CI).
# See docs/reliability.md.
.PHONY: chaos chaos-smoke
chaos: $(BENCH_STAMP)
	bash localstack/install-emulators.sh
	$(BIN)/python -m chaos $(ARGS)

chaos-smoke: $(BENCH_STAMP)
	bash localstack/install-emulators.sh
	$(BIN)/python -m chaos --smoke $(ARGS)

# The soak (not part of `make test` nor CI): steady load on DynamoDB Local + LocalStack
# for 60 minutes by default, a worker SIGKILLed every two minutes, maintenance every two
# seconds; prints memory, latency percentiles and errors per ten minutes and exits 1 if
# a run is lost (chaos/soak.py; `make soak ARGS="--minutes 5 --window 1"` for a short
# one). See docs/reliability.md, "Soak".
.PHONY: soak
soak: $(BENCH_STAMP)
	bash localstack/install-emulators.sh
	$(BIN)/python -m chaos.soak $(ARGS)
