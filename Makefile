PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-unit test-integration lint format clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m runlane_sqs.demo

test: $(STAMP)
	$(BIN)/python -m pytest tests

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

test-integration: $(STAMP)
	$(BIN)/python -m pytest tests/integration

lint: $(STAMP)
	$(BIN)/ruff check runlane_sqs maintenance tests
	$(BIN)/ruff format --check runlane_sqs maintenance tests
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix runlane_sqs maintenance tests
	$(BIN)/ruff format runlane_sqs maintenance tests

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
