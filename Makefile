# tidecd — see README.md. Heavy build outputs (Go binaries and caches) live outside the clone, in
# $(XDG_CACHE_HOME)/tidecd (default ~/.cache/tidecd), so later runs reuse them.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# make test: two pytest-xdist workers; the tests that mostly wait (outages, slow hooks) run on one while the
# other runs the rest (groups and order: tests/conftest.py). `make test XDIST=` runs it in one process.
XDIST ?= -n 2 --dist loadgroup --no-loadscope-reorder

.PHONY: all venv tools tools-if-missing test unit e2e lint demo bench bench-scale bench-scale-10k bench-peers screenshots package infra-check clean fuzz

all: test

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

tools:
	bash scripts/tools.sh

# Builds only what is missing (a no-op once the cache is warm).
tools-if-missing:
	@bash scripts/tools.sh --check 2>/dev/null || bash scripts/tools.sh

lint: venv
	$(VENV)/bin/ruff check shared functions tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

test: venv tools-if-missing lint
	$(VENV)/bin/pytest -q -p no:cacheprovider $(XDIST) $(PYTEST_ARGS)

unit: venv
	$(VENV)/bin/pytest -q tests/unit $(PYTEST_ARGS)

e2e: venv tools-if-missing
	$(VENV)/bin/pytest -q tests/e2e $(PYTEST_ARGS)

# Longer property-based fuzzing (hypothesis profile `fuzz`) and the issue's 150 MiB blob, tests/reliability.
fuzz: venv tools-if-missing
	HYPOTHESIS_PROFILE=fuzz TIDECD_TEST_BIG_BLOB_MIB=150 $(VENV)/bin/pytest -q -s tests/reliability $(PYTEST_ARGS)

demo: venv tools-if-missing
	$(PY) -m tidecd_dev.demo

bench: venv tools-if-missing
	$(PY) -m bench

# Only tidecd against the real Argo CD, Flux and gitops-agent (built on first use; TIDECD_BENCH_PEERS=Flux,...
# picks some, TIDECD_BENCH_PEER_REPS the repetitions).
bench-peers: venv tools-if-missing
	$(PY) -m bench peers

# Only the scale scenario (issue 17): 1,000 apps in 50 repos from cold through the functions, with a progress
# bar; TIDECD_SCALE_APPS / _REPOS / _WORKERS change its size. Then the same apps through Flux and Argo CD
# (bench/scale_peers.py; TIDECD_SCALE_PEERS=Flux,"Argo CD" or none, TIDECD_SCALE_PEER_TIMEOUT s each).
# Heavy: 10 minutes for tidecd alone on 2 cores, up to 2 x the peer timeout more.
bench-scale: venv tools-if-missing
	$(PY) -m bench.scale

# The 10,000-app scenario (bench/scale10k.py): the poll, the config load, the store and the fan-out of 10,000 apps
# on 200 repos for real, the steps of a sample of them against the API server; prints the counts and the cost
# table of docs/cost.md (bench/cost.py). Sizes: TIDECD_SCALE10K_APPS, TIDECD_SCALE10K_REPOS, TIDECD_SCALE10K_SAMPLE.
bench-scale-10k: venv tools-if-missing
	$(PY) -m bench.scale10k

# The dashboard's screenshots in docs/screenshots/ (README, docs/dashboard.md), taken by the browser tests that
# check what they show: the examples' list, an app during a sync and its history (test_ui), the sync panel, a
# dry run's results, a rollback's confirmation and a resource action (test_ui_act), a failing pod and the
# graph (test_explain), a page following a webhook push (test_ui_live), the create-app form and the app it
# deployed (test_app_write).
SCREENSHOT_TESTS = tests/e2e/test_ui.py::test_dashboard_shows_syncs_and_rolls_back_the_examples \
	tests/e2e/test_ui_act.py tests/e2e/test_explain.py::test_a_failing_pods_reason_and_logs_are_shown \
	tests/e2e/test_ui_live.py::test_open_pages_follow_a_webhook_push_and_fit_the_screen \
	tests/e2e/test_app_write.py::test_an_app_created_in_the_dashboard_is_a_commit_by_the_user_and_deploys_from_it
screenshots: venv tools-if-missing
	TIDECD_SCREENSHOTS=$(CURDIR)/docs/screenshots $(VENV)/bin/pytest -q -p no:cacheprovider $(SCREENSHOT_TESTS)

package: venv
	bash scripts/package.sh

infra-check: venv
	$(VENV)/bin/pytest -q tests/unit/test_infra.py tests/e2e/test_infra_scan.py
	bash scripts/checkov.sh

clean:
	rm -rf $(VENV) dist .tidecd .pytest_cache .mypy_cache .ruff_cache
