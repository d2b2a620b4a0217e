# Two entry points for a fresh machine: `make demo` and `make test`. Each builds its own
# virtualenv in .venv (pip only, no system packages needed beyond Python 3.11); `make test`
# also runs the client's tests on PyPy 3.9 (Debian: apt-get install pypy3 pypy3-venv).
PYTHON ?= python3
PYPY ?= pypy3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The demo needs the four packages only, not the test and lint tools.
SERVER_STAMP := $(VENV)/.installed-server
# setuptools notes each editable install with an "Editable installation." warning, which pip
# shows for a project in a local folder even under --quiet: that note alone is ignored (a
# filter on its text, added after any the caller set), so any other warning and any error
# still prints.
EDITABLE_NOTE_OFF := PYTHONWARNINGS="$${PYTHONWARNINGS:+$$PYTHONWARNINGS,}ignore:Editable installation"
# The client on its floor, Python 3.9: its tests under PyPy, its types under mypy 1.x.
VENV_PY39 := .venv-py39
VENV_MYPY39 := .venv-mypy39

# Tools built from Go modules and files taken from them, kept between clones in a cache
# keyed by their versions (tests/deploy/assets.py finds them by the same rules).
GO ?= go
TRAINJOB_STATUS_CACHE ?= $(HOME)/.cache/trainjob-status
export TRAINJOB_STATUS_CACHE
HELM_VERSION := $(shell awk '$$1 == "require" { $$1 = ""; $$0 = $$0 } $$1 == "helm.sh/helm/v4" { print $$2; exit }' tools/helm/go.mod)
HELM := $(TRAINJOB_STATUS_CACHE)/helm/$(HELM_VERSION)/helm

.PHONY: demo hooks test lint typecheck unit client-py39 client-py39-run kube-assets trainer-assets real-tier-assets \
	devcluster clean deploy-assets helm-bin crds

$(SERVER_STAMP): client/pyproject.toml server/pyproject.toml plugin/pyproject.toml devcluster/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(EDITABLE_NOTE_OFF) $(BIN)/pip install --quiet -e ./client -e ./server -e ./plugin -e ./devcluster
	touch $(SERVER_STAMP)

# pip >= 25.1 reads the workspace's [dependency-groups] (the upgrade above brings it).
$(STAMP): $(SERVER_STAMP) pyproject.toml
	$(BIN)/pip install --quiet --group test
	touch $(STAMP)

# ARGS go to the demo: `make demo ARGS=--keep` keeps it running until Ctrl-C.
demo: $(SERVER_STAMP)
	$(BIN)/trainjob-devcluster demo $(ARGS)

# Git runs tools/git-hooks/commit-msg on each commit: subjects of at most 72 characters.
hooks:
	git config core.hooksPath tools/git-hooks

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache --no-logo

$(VENV_MYPY39)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV_MYPY39)
	$(VENV_MYPY39)/bin/pip install --quiet --upgrade pip
	$(VENV_MYPY39)/bin/pip install --quiet --group mypy-py39
	touch $@

typecheck: $(STAMP) $(VENV_MYPY39)/.installed
	$(BIN)/mypy
	$(VENV_MYPY39)/bin/mypy --strict --python-version 3.9 -p trainjob_status

# The real tier (tests on kube-apiserver and etcd) finds the binaries through
# KUBEBUILDER_ASSETS: a folder given in the environment is used as it is; otherwise the
# cache, built first where Go is. Where Go is missing a SKIPPED line says so and those tests
# skip, except under CI (TRAINJOB_STATUS_CI=1), where both this and the tests fail.
# Kubeflow Trainer's programs (tests/kubeflow) are found the same way through
# TRAINER_ASSETS, built with them (make trainer-assets).
KUBEBUILDER_ASSETS ?= $(KUBE_ASSETS_DIR)
TRAINER_ASSETS ?= $(TRAINER_ASSETS_DIR)

real-tier-assets:
	@if [ "$(origin KUBEBUILDER_ASSETS)" = environment ]; then \
	  echo "real tier: KUBEBUILDER_ASSETS=$(KUBEBUILDER_ASSETS)"; \
	elif command -v $(GO) >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory kube-assets trainer-assets; \
	elif [ "$$TRAINJOB_STATUS_CI" = 1 ]; then \
	  echo "kube-assets: $(GO) is not installed; CI runs the real tier" >&2; exit 1; \
	else \
	  echo "kube-assets: SKIPPED, $(GO) is not installed (the real control plane's tests skip)"; \
	fi

unit: $(STAMP) real-tier-assets
	KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" TRAINER_ASSETS="$(TRAINER_ASSETS)" $(BIN)/pytest -q

$(VENV_PY39)/.installed: pyproject.toml
	rm -rf $(VENV_PY39)
	$(PYPY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 9) and "$(PYPY) is not Python 3.9")'
	$(PYPY) -m venv $(VENV_PY39)
	$(VENV_PY39)/bin/pip install --quiet --upgrade pip
	$(VENV_PY39)/bin/pip install --quiet --group client-py39
	touch $@

# The client installed as a training image gets it (from its wheel, not editable), and
# tests/client only: tests/conftest.py loads the server and the devcluster, which need 3.11.
# setuptools builds in client/build and keeps what it finds there, so a module since
# removed would come back in a later wheel: the build starts and ends without it.
# Where pypy3 is missing it is skipped with a line saying so, as tests needing a missing
# binary are, except under CI (TRAINJOB_STATUS_CI=1), where .ci/run installs it.
client-py39:
	@if command -v $(PYPY) >/dev/null 2>&1 || [ "$$TRAINJOB_STATUS_CI" = 1 ]; then \
	  $(MAKE) --no-print-directory client-py39-run; \
	else \
	  echo "client-py39: SKIPPED, $(PYPY) is not installed (apt-get install pypy3 pypy3-venv)"; \
	fi

client-py39-run: $(VENV_PY39)/.installed
	rm -rf client/build
	$(VENV_PY39)/bin/pip install --quiet --force-reinstall --no-deps ./client
	rm -rf client/build
	@echo "resolved versions in $(VENV_PY39) ($$($(VENV_PY39)/bin/python -c \
	  'import platform; print(platform.python_implementation(), platform.python_version())')):"
	@$(VENV_PY39)/bin/pip freeze
	$(VENV_PY39)/bin/pytest -q --confcutdir=tests/client tests/client

# helm (from tools/helm, at the version its go.mod pins) and the CRDs the manifests'
# components need (tools/crds/crds.txt), for the chart's tests and the manifests applied
# to a real API server. Where Go is missing it prints a SKIPPED line and those tests skip,
# except under CI (TRAINJOB_STATUS_CI=1), where the build runs and fails without Go.
deploy-assets:
	@if command -v $(GO) >/dev/null 2>&1 || [ "$$TRAINJOB_STATUS_CI" = 1 ]; then \
	  $(MAKE) --no-print-directory helm-bin crds; \
	else \
	  echo "deploy-assets: SKIPPED, $(GO) is not installed (helm and the CRDs are built from Go modules)"; \
	fi

helm-bin: $(HELM)

# Stamped with its version as helm's own release build does (`helm version` prints it);
# built beside its place and moved in, so an interrupted build never looks complete.
$(HELM):
	@test -n "$(HELM_VERSION)" || { echo "tools/helm/go.mod requires no helm.sh/helm/v4" >&2; exit 1; }
	mkdir -p $(@D)
	cd tools/helm && CGO_ENABLED=0 $(GO) build -buildvcs=false -trimpath \
	  -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$(HELM_VERSION)" \
	  -o $@.partial helm.sh/helm/v4/cmd/helm
	mv $@.partial $@

crds:
	tools/crds/fetch.sh $(TRAINJOB_STATUS_CACHE)

# The real control plane for the suite's "real" tier: kube-apiserver and etcd built from the
# Go module in tools/kube, whose go.mod pins both (the versions are read from it, so the
# cache folder's name changes with a bump and an old build is never reused for a new pin).
# A user with setup-envtest's binaries can point KUBEBUILDER_ASSETS at theirs instead.
KUBE_VERSION := $(shell awk '$$1 == "k8s.io/kubernetes" && $$2 ~ /^v/ {print $$2; exit}' tools/kube/go.mod)
ETCD_VERSION := $(shell awk '$$1 == "go.etcd.io/etcd/server/v3" && $$2 ~ /^v/ {print $$2; exit}' tools/kube/go.mod)
KUBE_ASSETS_CACHE ?= $(HOME)/.cache/trainjob-status/kube-assets
KUBE_ASSETS_DIR ?= $(KUBE_ASSETS_CACHE)/k8s-$(KUBE_VERSION)-etcd-$(ETCD_VERSION)
# kube-apiserver reports the version it was stamped with (kubectl and clients read it);
# an unstamped build would call itself v0.0.0-master.
KUBE_LDFLAGS := -s -w \
  -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
  -X k8s.io/component-base/version.gitMajor=$(word 1,$(subst ., ,$(patsubst v%,%,$(KUBE_VERSION)))) \
  -X k8s.io/component-base/version.gitMinor=$(word 2,$(subst ., ,$(KUBE_VERSION))) \
  -X k8s.io/component-base/version.gitTreeState=clean

kube-assets: $(KUBE_ASSETS_DIR)/.complete

# Built into a scratch folder beside the cache entry and moved in whole, so an interrupted
# build never leaves a folder that looks complete.
$(KUBE_ASSETS_DIR)/.complete:
	rm -rf "$(KUBE_ASSETS_DIR).partial"
	mkdir -p "$(KUBE_ASSETS_DIR).partial"
	cd tools/kube && CGO_ENABLED=0 $(GO) build -buildvcs=false -trimpath -ldflags "$(KUBE_LDFLAGS)" \
	  -o "$(KUBE_ASSETS_DIR).partial/" k8s.io/kubernetes/cmd/kube-apiserver go.etcd.io/etcd/server/v3
	mv "$(KUBE_ASSETS_DIR).partial/server" "$(KUBE_ASSETS_DIR).partial/etcd"
	touch "$(KUBE_ASSETS_DIR).partial/.complete"
	rm -rf "$(KUBE_ASSETS_DIR)"
	mv "$(KUBE_ASSETS_DIR).partial" "$(KUBE_ASSETS_DIR)"

# Kubeflow Trainer beside our server (the real tier's coexistence tests and
# bench/trainer_side_by_side.py): its controller manager and our runner of its status
# server package (tools/trainer/cmd/trainer-status-server), built from the Go module in
# tools/trainer, whose go.mod pins the Trainer and, through it, JobSet. The manifests the
# tests install come out of the same modules' sources in the Go module cache: the
# Trainer's CRDs, its torch-distributed ClusterTrainingRuntime and webhook configurations,
# and JobSet's CRD at the version the Trainer requires; the controller's RBAC (its
# ClusterRole and binding) and the patches its kustomization applies to the webhook
# configurations, in manifests/. Nothing is written by hand.
TRAINER_VERSION := $(shell awk '$$1 == "github.com/kubeflow/trainer/v2" && $$2 ~ /^v/ {print $$2; exit}' tools/trainer/go.mod)
JOBSET_VERSION := $(shell awk '$$1 == "sigs.k8s.io/jobset" && $$2 ~ /^v/ {print $$2; exit}' tools/trainer/go.mod)
TRAINER_ASSETS_CACHE ?= $(HOME)/.cache/trainjob-status/trainer-assets
TRAINER_ASSETS_DIR ?= $(TRAINER_ASSETS_CACHE)/trainer-$(TRAINER_VERSION)-jobset-$(JOBSET_VERSION)
# The folder of a module in the Go module cache (downloaded first where missing).
go_module_dir = $$(cd tools/trainer && $(GO) mod download -json $(1) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p')

trainer-assets: $(TRAINER_ASSETS_DIR)/.complete $(TRAINER_ASSETS_DIR)/manifests/.complete

# Copied apart from the build, so a build made before they were wanted gains them
# without being made again.
$(TRAINER_ASSETS_DIR)/manifests/.complete: $(TRAINER_ASSETS_DIR)/.complete
	rm -rf "$(TRAINER_ASSETS_DIR)/manifests"
	mkdir -p "$(TRAINER_ASSETS_DIR)/manifests.partial"
	trainer=$(call go_module_dir,github.com/kubeflow/trainer/v2@$(TRAINER_VERSION)) && \
	cp "$$trainer"/manifests/base/rbac/role.yaml "$$trainer"/manifests/base/rbac/role_binding.yaml \
	  "$$trainer"/manifests/base/webhook/patch_mutating.yaml \
	  "$$trainer"/manifests/base/webhook/patch_validating.yaml "$(TRAINER_ASSETS_DIR)/manifests.partial/"
	chmod -R u+w "$(TRAINER_ASSETS_DIR)/manifests.partial"
	touch "$(TRAINER_ASSETS_DIR)/manifests.partial/.complete"
	mv "$(TRAINER_ASSETS_DIR)/manifests.partial" "$(TRAINER_ASSETS_DIR)/manifests"

$(TRAINER_ASSETS_DIR)/.complete: tools/trainer/go.mod tools/trainer/go.sum tools/trainer/cmd/trainer-status-server/main.go
	rm -rf "$(TRAINER_ASSETS_DIR).partial"
	mkdir -p "$(TRAINER_ASSETS_DIR).partial/bin" "$(TRAINER_ASSETS_DIR).partial/crds" "$(TRAINER_ASSETS_DIR).partial/runtimes"
	cd tools/trainer && CGO_ENABLED=0 $(GO) build -buildvcs=false -trimpath -ldflags "-s -w" \
	  -o "$(TRAINER_ASSETS_DIR).partial/bin/" \
	  github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager ./cmd/trainer-status-server
	trainer=$(call go_module_dir,github.com/kubeflow/trainer/v2@$(TRAINER_VERSION)) && \
	jobset=$(call go_module_dir,sigs.k8s.io/jobset@$(JOBSET_VERSION)) && \
	cp "$$trainer"/manifests/base/crds/trainer.kubeflow.org_*.yaml \
	  "$$jobset"/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml "$(TRAINER_ASSETS_DIR).partial/crds/" && \
	cp "$$trainer"/manifests/base/runtimes/torch_distributed.yaml "$(TRAINER_ASSETS_DIR).partial/runtimes/" && \
	cp "$$trainer"/manifests/base/webhook/manifests.yaml "$(TRAINER_ASSETS_DIR).partial/webhooks.yaml"
	chmod -R u+w "$(TRAINER_ASSETS_DIR).partial"
	touch "$(TRAINER_ASSETS_DIR).partial/.complete"
	rm -rf "$(TRAINER_ASSETS_DIR)"
	mv "$(TRAINER_ASSETS_DIR).partial" "$(TRAINER_ASSETS_DIR)"

test: lint typecheck deploy-assets unit client-py39

devcluster: $(STAMP)
	$(BIN)/trainjob-devcluster serve --port 6443 --kubeconfig-out devcluster.kubeconfig

clean:
	rm -rf $(VENV) $(VENV_PY39) $(VENV_MYPY39) $(VENV_LOWEST) $(VENV_LOWEST_PY39) \
	  $(VENV_NEWEST_PY) .mypy_cache .ruff_cache .pytest_cache

# -- Dependency ranges at both ends, the image's lock, the image ----------------------
# `make test` runs the newest versions every range allows (a fresh .venv) on Python 3.11
# and PyPy 3.9; `make versions` prints them. The legs below run the rest (.ci/run times
# each):
#   test-lowest         the floor of every direct dependency (uv's lowest-direct), on
#                       Python 3.11: the server's, client's, plugin's and devcluster's tests, and
#                       the client's on CPython 3.9.
#   test-newest-python  the newest allowed versions on the newest CPython: the server's
#                       and the plugin's.
# The CPythons come from pyenv where it has them (as on CI machines), else from PATH.
PYTHON39 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.9*/bin/python3.9) python3.9)
PYTHON_NEWEST ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13) python3.13)
VENV_LOWEST := .venv-lowest
VENV_LOWEST_PY39 := .venv-lowest-py39
VENV_NEWEST_PY := .venv-newest-python
LOWEST := $(BIN)/uv pip install --quiet --resolution lowest-direct
# What the versions can change; test_manifests.py for kubernetes-validate's floor. What
# they cannot runs once, in `make test`: tests/e2e (a Prometheus binary), tests/bench
# (speed), tests/demo, and the rest of tests/deploy (the image, the rehearsal).
LOWEST_TESTS := tests/server tests/client tests/devcluster tests/client_with_server \
  tests/kubectl_plugin tests/deploy/test_manifests.py

.PHONY: versions test-lowest test-newest-python lock image

versions: $(STAMP)
	@echo "resolved versions in $(VENV) ($$($(BIN)/python --version)):"
	@$(BIN)/pip freeze --exclude-editable

test-lowest: $(STAMP) real-tier-assets
	rm -rf $(VENV_LOWEST) $(VENV_LOWEST_PY39)
	$(PYTHON) -m venv $(VENV_LOWEST)
	$(LOWEST) --python $(VENV_LOWEST)/bin/python -e ./client -e ./server -e ./plugin \
	  -e ./devcluster --group test
	@echo "resolved versions in $(VENV_LOWEST) ($$($(VENV_LOWEST)/bin/python --version)):"
	@$(VENV_LOWEST)/bin/pip freeze --exclude-editable
	$(VENV_LOWEST)/bin/python .ci/floors.py test server/pyproject.toml plugin/pyproject.toml \
	  devcluster/pyproject.toml
	KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" TRAINER_ASSETS="$(TRAINER_ASSETS)" \
	  $(VENV_LOWEST)/bin/pytest -q -p no:cacheprovider $(LOWEST_TESTS)
	$(PYTHON39) -m venv $(VENV_LOWEST_PY39)
	$(LOWEST) --python $(VENV_LOWEST_PY39)/bin/python --group client-py39
	rm -rf client/build
	$(VENV_LOWEST_PY39)/bin/pip install --quiet --no-deps ./client
	rm -rf client/build
	@echo "resolved versions in $(VENV_LOWEST_PY39) ($$($(VENV_LOWEST_PY39)/bin/python --version)):"
	@$(VENV_LOWEST_PY39)/bin/pip freeze
	$(VENV_LOWEST_PY39)/bin/python .ci/floors.py client-py39
	$(VENV_LOWEST_PY39)/bin/pytest -q -p no:cacheprovider --confcutdir=tests/client tests/client

test-newest-python: real-tier-assets
	rm -rf $(VENV_NEWEST_PY)
	$(PYTHON_NEWEST) -m venv $(VENV_NEWEST_PY)
	$(VENV_NEWEST_PY)/bin/pip install --quiet --upgrade pip
	$(EDITABLE_NOTE_OFF) $(VENV_NEWEST_PY)/bin/pip install --quiet -e ./client -e ./server -e ./plugin \
	  -e ./devcluster --group test
	@echo "resolved versions in $(VENV_NEWEST_PY) ($$($(VENV_NEWEST_PY)/bin/python --version)):"
	@$(VENV_NEWEST_PY)/bin/pip freeze --exclude-editable
	KUBEBUILDER_ASSETS="$(KUBEBUILDER_ASSETS)" TRAINER_ASSETS="$(TRAINER_ASSETS)" \
	  $(VENV_NEWEST_PY)/bin/pytest -q -p no:cacheprovider tests/server tests/kubectl_plugin

# The image's lock: the newest versions the server's ranges allow, for the image's
# Python (3.11, the Dockerfile's PYTHON_IMAGE) on any platform, each with its hashes.
lock: $(STAMP)
	$(BIN)/uv pip compile --quiet --upgrade --generate-hashes --universal --python-version 3.11 \
	  --no-emit-package trainjob-status --no-emit-package trainjob-status-server \
	  --custom-compile-command "make lock" --output-file requirements/server.lock \
	  requirements/server.in

# The OCI labels: the server's version, this commit, and where it comes from (the
# remote's URL without any credentials in it).
IMAGE_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' server/pyproject.toml)
SERVER_IMAGE ?= trainjob-status:$(IMAGE_VERSION)
IMAGE_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE_SOURCE ?= $(shell git remote get-url origin 2>/dev/null | sed 's|://[^/@]*@|://|' || echo unknown)

image:
	DOCKER_BUILDKIT=1 docker build --build-arg VERSION=$(IMAGE_VERSION) \
	  --build-arg REVISION=$(IMAGE_REVISION) --build-arg SOURCE=$(or $(IMAGE_SOURCE),unknown) \
	  --tag $(SERVER_IMAGE) .

# -- kubectl trainjob through krew ----------------------------------------------------
# plugin/krew/trainjob.yaml installs a launcher from an archive on the release's page;
# the launcher runs the kubectl-trainjob package, which pip installs. The archive is
# built the same, byte for byte, on any machine (plugin/krew/archive.py), and its sha256
# is the manifest's (tests/kubectl_plugin/test_krew.py). At release, `make krew-manifest
# REPOSITORY=owner/name` writes the manifest with that repository's release page filled
# in; both files go on the release.
KREW_OUT := dist/krew

.PHONY: krew-archive krew-manifest

krew-archive:
	$(PYTHON) plugin/krew/archive.py archive $(KREW_OUT)

krew-manifest:
	@test -n "$(REPOSITORY)" || { echo "krew-manifest: set REPOSITORY=owner/name" >&2; exit 1; }
	$(PYTHON) plugin/krew/archive.py manifest $(REPOSITORY) $(KREW_OUT)
