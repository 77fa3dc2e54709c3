# The README's two commands are `make run` and `make test`; everything they need is set up here.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test lint typecheck unit bench clean setup proto bench-e2e image dist

setup: $(STAMP)

$(STAMP): pyproject.toml
	bash scripts/setup-venv.sh "$(PYTHON)" "$(VENV)"
	rm -f $(VENV)/.installed-*
	touch $@

run: $(STAMP)  # KEEP=1: the cluster and its web console keep running after the demo
	$(PY) -m replog.demo $(if $(KEEP),--keep)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy

test: lint typecheck
	bash scripts/ensure-command.sh java openjdk-17-jre-headless
	bash scripts/ensure-command.sh kubectl kubectl kubernetes-client
	bash scripts/ensure-command.sh promtool prometheus
	bash scripts/ensure-command.sh nats-server nats-server  # bench/peers.py's smoke test
	bash scripts/ensure-command.sh redis-server redis-server
	bash scripts/ensure-command.sh kcat kcat kafkacat  # tests/integration/test_kafka_kcat.py
	bash scripts/ensure-chromium.sh  # tests/browser: the console in headless Chromium
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/storage.py

# The node image (Dockerfile), built from wheels made here; starts a local engine if needed.
image: $(STAMP)
	VENV=$(VENV) bash scripts/build-image.sh

# A wheel and an sdist in dist/ (the wheel is built from the sdist, which checks it is whole).
dist: $(STAMP)
	rm -f dist/replog-*.whl dist/replog-*.tar.gz
	$(PY) -m build --outdir dist .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .grimp_cache .import_linter_cache

# Regenerate replog/v1 from proto/ (commit the result; tests/unit/test_proto_generated.py checks it).
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. proto/replog/v1/*.proto

bench-e2e: $(STAMP)
	$(PY) bench/e2e.py
