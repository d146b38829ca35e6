# The two-command quick start: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck unit bench bench-quick clean

RUNTIME_STAMP := $(VENV)/.installed-runtime
DEMO_DATA := roost-demo-data

# One line says what the install does and how long it takes; pip's own output goes to
# $(VENV)/install.log and is shown only when the install fails. The demo needs roost alone
# (~60 MB, under a minute); the tests and linters need the dev tools too (~430 MB, a minute
# or two on a fresh clone: mypy, ruff, Selenium for the console's browser tests (the browser
# and its driver are Debian's), Temporal's SDK with its dev server for the Temporal host's
# tests).
$(RUNTIME_STAMP): pyproject.toml
	@echo "Installing roost into $(VENV) (editable, runtime dependencies only: ~60 MB, under a minute; pip's log: $(VENV)/install.log)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@{ $(PY) -m pip install --upgrade pip && $(PY) -m pip install -e .; } \
		> $(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log; echo "the install failed (log above)"; exit 1; }
	@touch $(RUNTIME_STAMP)

$(STAMP): pyproject.toml
	@echo "Installing roost and its dev tools into $(VENV) (editable; ~430 MB, a minute or two on a fresh clone; pip's log: $(VENV)/install.log)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@{ $(PY) -m pip install --upgrade pip && $(PY) -m pip install -e '.[dev]'; } \
		> $(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log; echo "the install failed (log above)"; exit 1; }
	@touch $(STAMP) $(RUNTIME_STAMP)

demo: $(RUNTIME_STAMP)
	@echo "Running examples/order_fulfillment.py: the order pipeline, with a SIGKILL mid-way (data kept in $(DEMO_DATA)/)"
	@$(PY) examples/order_fulfillment.py --keep-data $(DEMO_DATA)

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests examples benchmarks
	$(VENV)/bin/ruff format --check src tests examples benchmarks

typecheck: $(STAMP)
	$(VENV)/bin/mypy --strict src

# Two workers on the 2-core machines CI runs on (at most four elsewhere): most tests wait on
# subprocesses, disks and the Temporal dev server (one per worker), so two overlap well.
unit: $(STAMP)
	$(VENV)/bin/pytest --numprocesses=auto --maxprocesses=4

bench-quick: $(STAMP)
	$(PY) -m benchmarks --quick --json $(VENV)/bench-quick.json

test: lint typecheck bench-quick unit

bench: $(STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis $(DEMO_DATA)
