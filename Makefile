# hpcc: every target does its own set-up, so each works on a fresh machine.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
EXAMPLE ?= examples/p5-llm.yaml
APT_PACKAGES := openssh-server openssh-client openmpi-bin libopenmpi-dev libfabric-bin shellcheck iproute2 procps util-linux curl python3 iptables slurm-wlm munge prometheus prometheus-node-exporter \
  docker-registry skopeo umoci crun squashfs-tools busybox-static

.PHONY: setup deps plan test test-long box bench golden clean

# The plan needs only the runtime (requirements.txt); the tests add pytest, moto's server, the box's torch and awscli (1.6 GB).
$(VENV)/.runtime: requirements.txt pyproject.toml setup.py
	test -x $(PY) || python3 -m venv $(VENV)
	@echo "installing hpcc's runtime packages into $(VENV) (requirements.txt)"
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --progress-bar on -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	touch $@

$(VENV)/.installed: $(VENV)/.runtime requirements-dev.txt
	@echo "installing the test packages into $(VENV) (requirements-dev.txt: pytest, moto's server, torch and awscli for the box)"
	$(PY) -m pip install --progress-bar on -r requirements-dev.txt
	touch $@

setup: $(VENV)/.installed

# Debian tools the tests run for real (sshd, mpirun, fi_info, shellcheck, ip netns, promtool, node_exporter): apt-get needs root.
deps:
	@missing=$$(for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ] && [ "$$(id -u)" != 0 ]; then \
	  echo "make test needs these Debian packages, and root to install them: $$missing"; \
	  echo "run 'sudo make deps' once, or test without them: make setup && $(PY) -m pytest -m 'not box'"; \
	  echo "(the box tests need root anyway; the tests that run a missing tool fail)"; exit 1; \
	elif [ -n "$$missing" ]; then \
	  echo "installing Debian packages: $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

plan: $(VENV)/.runtime
	$(VENV)/bin/hpcc plan $(EXAMPLE) --out plan

# Three workers on two cores. make test boots no box: every box module that boots one is marked `long`.
test: setup deps
	$(PY) -m pytest -q -n 3 --dist loadgroup -m 'not long'

# Every box scenario, in one process: the shared fleet box booted once for the modules that share it, then the few
# boxes of another shape (tests/box/README.md). CI runs it after make test (.ci/run). -s: the modules print what
# they measure (`[box] ...`, `[fleet] ...`).
test-long: setup deps
	$(PY) -m pytest -q -s -m long tests/box

# Only the cluster-in-a-box tests, the long ones included (root and ip netns; about 45 minutes on 2 cores). See tests/box/README.md.
box: setup deps
	$(PY) -m pytest -q -m box tests/box

# ruff (lint and format, pyproject.toml's [tool.ruff]) and mypy ([tool.mypy]); installs both into .venv itself.
.PHONY: lint
$(VENV)/.lint: $(VENV)/.runtime requirements-lint.txt
	$(PY) -m pip install --quiet -r requirements-lint.txt
	touch $@

lint: $(VENV)/.lint
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# Every benchmark runs whatever the ones before it found; a script says a missed target with a `MISS ...` line and
# exits non-zero. The missed targets of all of them are listed again at the end, and then make fails.
BENCHES := bench_plan bench_day2 bench_controller bench_ready bench_scale bench_series bench_prometheus
bench: setup
	@logs=$$(mktemp -d); failed=""; \
	for b in $(BENCHES); do \
	  echo "== scripts/$$b.py"; \
	  $(PY) scripts/$$b.py 2>&1 | tee "$$logs/$$b.log"; rc=$${PIPESTATUS[0]}; \
	  [ "$$rc" -eq 0 ] || failed="$$failed $$b (exit $$rc)"; \
	done; \
	echo "== missed targets"; \
	for b in $(BENCHES); do grep '^MISS' "$$logs/$$b.log" | sed "s|^|scripts/$$b.py: |"; done; \
	rm -rf "$$logs"; \
	if [ -n "$$failed" ]; then echo "not every target met:$$failed"; exit 1; fi; echo "every target met"

# Re-render tests/golden/ from the templates; review the diff before committing.
golden: setup
	$(PY) scripts/refresh_golden.py

clean:
	rm -rf plan build .pytest_cache
