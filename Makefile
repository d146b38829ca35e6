# The two-command quick start: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench bench-quick clean

# One line says what the install does; pip's own output goes to $(VENV)/install.log and is
# shown only when the install fails.
$(STAMP): pyproject.toml
	@echo "Installing roost and its dev tools into $(VENV) (editable; pip's log: $(VENV)/install.log)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@{ $(PY) -m pip install --upgrade pip && $(PY) -m pip install -e '.[dev]'; } \
		> $(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log; echo "the install failed (log above)"; exit 1; }
	@touch $(STAMP)

demo: $(STAMP)
	@echo "Running examples/order_fulfillment.py: the order pipeline, with a SIGKILL mid-way"
	@$(PY) examples/order_fulfillment.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests examples benchmarks
	$(VENV)/bin/ruff format --check src tests examples benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict src

unit: $(STAMP)
	$(VENV)/bin/pytest

bench-quick: $(STAMP)
	$(PY) -m benchmarks --quick --json $(VENV)/bench-quick.json

test: lint typecheck bench-quick unit

bench: $(STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
