# servelab: one target per task. Each target sets up .venv first (nothing to install by hand).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
REPO   := examples/repository
# the example models select_vs_exhaustive runs in `make bench`: credit and graphsage take ~35 min together here;
# resnet50 and text add ~2 h each (full exhaustive grids of ~216 points): make bench SELECT_MODELS=credit,resnet50,text,graphsage
SELECT_MODELS ?= credit,graphsage

.PHONY: help venv demo test test-fast lint bench clean browser prometheus peers

help:
	@echo "make demo   - set up, build the example repository, serve it and compare runtimes"
	@echo "make test   - set up, lint, and run the whole test suite"
	@echo "make lint   - ruff, mypy, the import-layer check and the import-cycle check"
	@echo "make peers  - install the peer servers' own environments under .peers/ (make test does it beside lint)"
	@echo "make bench  - run the benchmarks (tables printed, JSON in benchmarks/results/)"

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[bench,dev]"  # the server, the measuring instrument and the test tools
	$(PY) -m pip install -q --no-deps "tensorflow-serving-api>=2.16"  # extra tfserving-client: it asks for tensorflow, dev has tensorflow-cpu
	$(PY) -c "import servelab.protocol"  # generates the gRPC/protobuf code from the bundled .proto files
	touch $(STAMP)

venv: $(STAMP)

$(REPO)/.built: $(STAMP) examples/build_repository.py
	$(PY) examples/build_repository.py --out $(REPO)
	touch $@

demo: $(REPO)/.built
	$(VENV)/bin/servelab demo $(REPO)

# Headless Chromium for the HTML-report test (Debian's package; needs root, as on CI). Without it that
# one test skips and says why.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) ; } || \
	  echo "chromium not installed: the HTML report test will skip"

# Prometheus for the dashboard test (Debian's package, the same way); without it that test skips and says why.
prometheus:
	@command -v prometheus >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null) ; } || \
	  echo "prometheus not installed: the dashboard test will skip"

# The peers' own environments under .peers/ (TorchServe, MLServer, Triton, perf_analyzer): tests and
# `servelab compare` install them on first use; `make test` installs them beside lint, so the suite does not
# wait ~2 min for pip. A peer that cannot be installed is reported; its tests say why they skip or fail.
peers: $(STAMP)
	$(PY) tools/install_peers.py

test: $(STAMP)
	@$(MAKE) --no-print-directory peers & peers=$$!; \
	  $(MAKE) --no-print-directory browser prometheus lint; lint=$$?; wait $$peers; exit $$lint
	$(PY) -m pytest -q --durations=30 tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -x tests/unit

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples tools
	$(VENV)/bin/mypy src/servelab
	$(VENV)/bin/lint-imports
	$(PY) tools/check_cycles.py

# Each script writes its JSON in benchmarks/results/ and its own marked section(s) of benchmarks/RESULTS.md
# (tests/integration/bench/test_results_sections.py checks that every section there is written by a step here).
# A missed bar is a FAIL in its section, not a failed step: a step fails only when it could not measure.
bench: $(STAMP) $(REPO)/.built
	$(PY) benchmarks/engine_overhead.py
	$(PY) benchmarks/serving_overhead.py
	$(PY) benchmarks/grpc_event_engine.py
	$(PY) benchmarks/batching.py
	$(PY) benchmarks/loadgen_ceiling.py
	$(PY) benchmarks/soak.py --rollout
	$(PY) benchmarks/shadow_overhead.py
	$(VENV)/bin/servelab compare mlp --repo $(REPO) --targets servelab-onnxruntime,servelab-openvino,servelab-torch,inprocess-ort,fastapi-ort,torchserve,mlserver,mlserver@grpc --batch-sizes 1,32 --concurrency 8 --rounds 3 --baseline inprocess-ort --output benchmarks/results/compare.json --html out/compare.html --results-md benchmarks/RESULTS.md
	$(PY) benchmarks/vs_triton.py
	$(PY) benchmarks/request_path.py
	$(PY) benchmarks/processes_model.py
	$(PY) benchmarks/grpc_floor.py
	$(PY) benchmarks/ray_overhead.py
	$(PY) benchmarks/select_vs_exhaustive.py --models $(SELECT_MODELS)
	test -f out/graphs/g1m/manifest.json || $(VENV)/bin/servelab graph synth --nodes 1000000 --out out/graphs/g1m
	$(PY) benchmarks/graph_sampler.py --graph-dir out/graphs/g1m
	test -f out/models/sage/meta.json || $(VENV)/bin/servelab graph train out/graphs/g1m --out out/models/sage
	$(PY) benchmarks/graphsage.py --graph-dir out/graphs/g1m --model-dir out/models/sage
	$(PY) benchmarks/graphsage_e2e.py --graph-dir out/graphs/g1m --model-dir out/models/sage --runtimes onnxruntime openvino torch

clean:
	rm -rf $(REPO) benchmarks/results/*.tmp .pytest_cache .mypy_cache .ruff_cache
