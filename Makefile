# The two entry points of the Quick start: `make run` and `make test`.
# Both create the project's virtual environment at .venv/ and install what they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint typecheck unit kafka image clean loadgen chart-tools chart-check browser

# The package version: the gateway image's tag, the one groupgate.testing.containers defaults to.
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= groupgate

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Fetch Apache Kafka (broker, tools, older clients, Streams, Connect) and Spark's Kafka connector from Maven Central
# into ~/.cache/groupgate.
kafka: $(STAMP)
	$(BIN)/groupgate kafka fetch

run: $(STAMP)
	$(BIN)/groupgate dev

lint: $(STAMP)
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy coordinator translate gateway groupgate rehearsal

test: $(STAMP) kafka chart-tools browser lint typecheck
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=25

# Headless Chromium for the live groups page's test (compat_tests/test_groups_page_browser.py): Debian's
# package, installed once (as root, or through sudo).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	command -v chromium >/dev/null || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium; }

# The gateway image of this version (docker/Dockerfile), tagged groupgate:$(VERSION) and groupgate:latest.
image:
	docker build -f docker/Dockerfile --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) -t $(IMAGE):latest .

# What validates the Helm chart (deploy/helm/groupgate), into .tools/ (git-ignored): helm and kubeconform
# built from the Go module proxy, the Kubernetes JSON schemas from PyPI (kubernetes-validate), the
# ServiceMonitor/PodMonitor schemas from prometheus-operator's Go module (deploy/chart_check.py).
# tests/deploy runs them; chart-check alone lints, renders every variant and validates it, offline.
chart-tools: $(STAMP)
	$(BIN)/python deploy/chart_check.py tools

chart-check: chart-tools
	$(BIN)/python deploy/chart_check.py check

# The coordinator load generator (bench/coordinator_scale.py runs it): Go, modules from the Go module proxy.
loadgen:
	cd bench/loadgen && go build -o bin/loadgen .

clean:
	rm -rf $(VENV) build *.egg-info bench/loadgen/bin .tools
