# gpucluster — every entry point a platform engineer or CI needs.
#   make up      the local simulated GPU cluster with the `local` stack deployed by the real engine
#   make test    lint, then unit, Ansible and integration tests (what CI runs)
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON      ?= python3
VENV        := .venv
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
PY_PACKAGES := contract components policies daemons

.PHONY: help venv venv-lock lint lint-python lint-ansible test unit ansible-test integration \
        lint-go go-test check-stacks policy render tools debian-deps images images-lock sim-up sim-down up down bench bench-scale bench-scale-capacity demo chaos daemons-status clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

# Every distribution comes from venv.lock, each file checked against its sha256; the project is installed editable
# with the locked setuptools (no build isolation, so nothing unhashed is fetched), and pip check confirms the lock is
# complete. After a pin in pyproject.toml changed: make venv-lock.
$(STAMP): pyproject.toml venv.lock
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || \
	  { rm -rf $(VENV); echo "error: $(PYTHON) -m venv failed (on Debian: apt-get install python3-venv)" >&2; exit 1; }
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r venv.lock
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m pip check
	@touch $@

venv: $(STAMP) ## create .venv with the Python dependencies of venv.lock, each checked by its hash

venv-lock: venv ## after a pin in pyproject.toml changed: resolve the build venv into venv.lock again
	$(PY) -m images lock-venv

lint: lint-python lint-ansible lint-go ## ruff, strict mypy, ansible-lint (production profile), gofmt + go vet

lint-python: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The Go virtual node: formatting and vet. Read-only modules: go.mod is never rewritten and every module the proxy
# serves is checked against go.sum (a missing or changed sum fails the build instead of being recorded).
GO_ENV := GOFLAGS=-mod=readonly GOTOOLCHAIN=local
lint-go:
	@test -z "$$(gofmt -l virtualnode)" || { gofmt -l virtualnode; echo "gofmt: the files above need formatting"; exit 1; }
	cd virtualnode && $(GO_ENV) go vet ./...

go-test: ## the virtual node's Go unit tests
	cd virtualnode && $(GO_ENV) go test -p 2 ./...

lint-ansible: $(STAMP)
	@if [ -d ansible/roles ]; then cd ansible && ../$(VENV)/bin/ansible-lint --profile production; \
	 elif [[ "$${CI,,}" =~ ^(1|true|yes)$$ ]]; then echo "CI=$$CI and ansible/roles is missing: nothing to lint" >&2; exit 1; \
	 else echo "ansible/roles not present yet: nothing to lint"; fi

check-stacks: $(STAMP) ## validate every stack file offline
	@for f in stacks/Pulumi.*.yaml; do $(PY) -m components.config check $$f || exit 1; done

policy: tools venv ## the real engine previews every stack with the policy pack (local against the sim)
	@bash policies/preview-stacks.sh $(STACKS)

debian-deps: ## install the Debian packages make up, make images and the tests use (prometheus, mmdebstrap, runc ...), if missing
	@bash tools/install-debian-deps.sh

# No container engine: a Debian base by mmdebstrap, the wheels and the Go binary on top, OCI archives in .state/images.
images: debian-deps venv ## build the daemon and virtual-node images offline (.state/images); PIN=prod writes their digests into that stack
	$(PY) -m images build $(if $(PIN),--stack $(PIN) --pin $(PIN)) $(IMAGES_ARGS)

images-lock: venv ## resolve the daemon image's wheels from pyproject.toml's pins into images/daemons.lock
	$(PY) -m images lock

# The tests that need no simulated cluster run on two workers, the integration tests among them that start their own
# API server, Prometheus or engine (no cluster is up yet: nothing starves its bring-up); then the tests on the one
# simulated cluster (marked cluster by tests/conftest.py), one at a time.
# The linters and the Go tests read the tree and write nothing it shares: they run side by side (each one's output
# kept together); then the Debian packages and the tools, then pytest.
test: $(STAMP) ## the test command: lint, then every test (Go, unit, Ansible, telemetry, integration)
	$(MAKE) --no-print-directory -j4 --output-sync=target lint-python lint-ansible lint-go go-test
	$(MAKE) --no-print-directory debian-deps tools
	$(PY) -m pytest -n 2 --dist loadgroup -m "not (integration and cluster)"
	$(PY) -m pytest -m "integration and cluster"

unit: $(STAMP) ## unit tests only (no simulated cluster)
	$(PY) -m pytest -m "not integration and not molecule and not images"

bench: $(STAMP) ## run every benchmark script in benchmarks/ and print its figures
	@set -e; for b in benchmarks/bench_*; do echo "== $$b"; case $$b in *.py) $(PY) $$b ;; *) bash $$b ;; esac; done

# Not one of bench's: it replaces the running cluster and takes an hour or more (benchmarks/scale_flip.py says how long).
bench-scale: $(STAMP) ## the flip at 96 and 512 nodes (scale stacks in benchmarks/stacks), then the local cluster back
	@$(PY) benchmarks/scale_flip.py $(SCALE_ARGS)

bench-scale-capacity: $(STAMP) ## quota correction at 96 nodes and 4 ClusterQueues with 10 nodes lost, then the local cluster back
	@$(PY) benchmarks/scale_capacity.py

clean: ## remove local build state (not the tool cache)
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .state rendered

# --- the simulated cluster (sim/) -------------------------------------------------------------------------------
STACK ?= prod
DIR   ?= rendered/$(STACK)

tools: ## build the pinned Go tools into ~/.cache/gpucluster/tools/bin (idempotent, per source group)
	@tools/build.sh

sim-up: debian-deps venv tools ## start the simulated GPU cluster (kwok nodes from the local stack, the real node running our images, kubeconfig .state/sim/kubeconfig)
	@sim/up.sh

sim-down: ## delete the simulated cluster and its state
	@sim/down.sh

up: debian-deps venv tools ## simulated cluster (kwok GPU nodes and one real node) + the local stack applied by Pulumi + the Kueue controller, the stack's daemons, then a summary
	@sim/stack-up.sh

down: ## stop Kueue, drop the local stack's state, delete the simulated cluster
	@sim/stack-down.sh

demo: up ## two narrated flips on make up's cluster, make-before-break then preempt-then-burst: .state/flip/flip-<path>.{csv,png,json}
	@$(PY) sim/flip.py --path make-before-break --out .state/flip
	@$(PY) sim/flip.py --path preempt-then-burst --out .state/flip

chaos: up ## the flip under faults: 20 SIGKILLs over 4 cycles, 20% failed creates, 5%/min deaths, Prometheus outage
	@$(PY) sim/chaos.py --kills 20 --cycles 4 --prometheus-outage --out .state/chaos

daemons-status: ## the local daemons make up started (sim/processes.py)
	@$(PY) sim/processes.py status

render: tools venv ## write a stack's manifests with the provider's render mode: make render STACK=prod DIR=rendered/prod
	@sim/render.sh "$(STACK)" "$(DIR)"
