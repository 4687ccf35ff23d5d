# Ragdesk. The two commands a newcomer needs:
#   make run    set everything up (virtualenv, dependencies, default models) and start the server
#   make test   the full test suite: lint, types, unit, real-model, HTTP and browser tests,
#               then the storage tests again on PostgreSQL + pgvector
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.ragdesk-installed

.PHONY: run test setup browser lint typecheck pytest pytest-postgres bench clean

run: setup
	$(BIN)/ragdesk serve

setup: $(STAMP)

# llama.cpp is compiled for this machine's CPU, less AMX: some virtual machines list AMX
# but fault on its first tile instruction (SIGILL in llama_decode). --no-cache-dir: a wheel
# cached from another CPU or other flags must never be reused.
NO_AMX := -mno-amx-tile -mno-amx-int8 -mno-amx-bf16
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=ON -DCMAKE_C_FLAGS='$(NO_AMX)' -DCMAKE_CXX_FLAGS='$(NO_AMX)'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip install --quiet --no-cache-dir \
	  "$$(grep -o 'llama-cpp-python==[0-9.]*' pyproject.toml)"
	# torch is pinned to 2.13.0 in pyproject.toml, the CPU build on these machines.
	$(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/ragdesk prepare
	touch $@

# Browser tests drive Debian's Chromium; Playwright never downloads a browser of its own.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -q && apt-get install -y -q chromium; \
	  else echo "browser tests need Debian's chromium: sudo apt-get install chromium" >&2; exit 1; fi; }

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

pytest: setup browser
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/pytest

# The storage-facing tests again with every table on PostgreSQL + pgvector (a real server
# from the pgserver wheel, started by the suite itself: tests/pg_kit.py). Tests that start
# PostgreSQL on their own (test_pg_*, test_fronts*, test_migrate_store) ran in the pass above.
PG_TESTS = tests/test_admin.py tests/test_admin_groups_ui.py tests/test_answer_versions.py \
	tests/test_api.py tests/test_api_library.py tests/test_auth.py tests/test_chat.py \
	tests/test_citations.py tests/test_database_unavailable.py tests/test_embedding_cache.py \
	tests/test_feedback.py tests/test_followup.py tests/test_groups.py tests/test_identities.py \
	tests/test_ingest.py tests/test_leases.py tests/test_library.py tests/test_mcp.py \
	tests/test_neighbours.py tests/test_openai.py tests/test_openai_grounded.py \
	tests/test_permissions.py tests/test_ratelimit.py tests/test_search.py \
	tests/test_sharing.py tests/test_sources.py tests/test_stopping.py tests/test_usage.py \
	tests/test_usage_ui.py tests/test_workspaces.py tests/test_migrations.py

pytest-postgres: setup
	RAGDESK_TEST_STORE=postgresql HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/pytest $(PG_TESTS)

# Each stage timed; the times are printed at the end (scripts/stages.sh).
test:
	@MAKE="$(MAKE)" bash scripts/stages.sh setup browser lint typecheck pytest pytest-postgres

# Every benchmark of docs/BENCHMARKS.md, one after another (about an hour on 2 cores).
bench: setup
	$(BIN)/python -m bench.ingest
	$(BIN)/python -m bench.ingest_chat
	$(BIN)/python -m bench.fair_ingest
	$(BIN)/python -m bench.query
	$(BIN)/python -m bench.chat
	$(BIN)/python -m bench.serving
	$(BIN)/python -m bench.embedders
	$(BIN)/python -m bench.retrieval_quality
	$(BIN)/python -m bench.search_scale
	$(BIN)/python -m bench.mapped_index
	$(BIN)/python -m bench.sampler_guard
	$(BIN)/python -m bench.soak
	$(BIN)/python -m bench.engine_profile
	$(BIN)/python -m bench.serving --peer build
	$(BIN)/python -m bench.speculative
	$(BIN)/python -m bench.fleet
	$(BIN)/python -m bench.embedding_fleet --repeat 2
	$(BIN)/python -m bench.ocr
	$(BIN)/python -m bench.answers
	$(BIN)/python -m bench.relevance_floor
	$(BIN)/python -m bench.followups --answers
	$(BIN)/python -m bench.prefetch

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
