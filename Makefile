# The two commands of the README: `make run` (kernel-code on the shipped example) and
# `make test`. Both set up everything first, on a fresh machine.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0

.PHONY: install run test gpu-test browser postgres

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	# torch first and pinned: a bare `torch` requirement would pull a multi-GB CUDA build.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

# Debian's chromium drives the dashboard's browser tests (browsers cannot be downloaded).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium missing and not root: browser tests will be skipped"; fi; }

# Debian's PostgreSQL server binaries: the store's tests start a private server of their own on
# 127.0.0.1 (tests/pg_server.py); nothing is started here and no service is enabled.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else echo "PostgreSQL missing and not root: PostgreSQL tests will be skipped"; fi; }

run: install
	$(VENV)/bin/kernel-code $(ARGS)

# Two pytest-xdist workers, a file's tests on one (its module fixtures are real runs, made once),
# the dashboard's files on one; the costliest files first (tests/conftest.py orders them).
PYTEST_WORKERS ?= 2
test: install browser postgres
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --no-loadscope-reorder $(PYTEST_ARGS)
