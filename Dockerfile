# syntax=docker/dockerfile:1.7
#
# The trainjob-status server image: a slim Python 3.11 runtime with the server installed
# in a virtualenv, run as a fixed non-root user, fit for a read-only root filesystem.
#
#   make image        (docker build with the labels below filled in)
#
# Needs BuildKit (Docker 23 and later use it by default; `make image` sets
# DOCKER_BUILDKIT=1 for older ones): the scripts are heredocs and the runtime stage
# mounts the build stage's wheels instead of copying them into a layer.
#
# Every third-party package comes from requirements/server.lock, pinned with its hashes
# (`make lock` refreshes it), so an image built later holds the versions CI ran.
#
# The BUILD and INSTALL steps are the image's whole install: tests/deploy/test_image.py
# runs these same two scripts into a fresh virtualenv and starts the server from it, so
# what the image installs is tested without a Docker engine. Keep them self-contained
# (inputs: WHEELS, VENV).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- 1: wheels for the server and every dependency (no compiler reaches the runtime) ---
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WHEELS=/wheels
WORKDIR /src
COPY client ./client
COPY server ./server
COPY requirements/server.lock ./requirements/server.lock
RUN <<'BUILD'
set -eu
# The dependencies: the locked versions' published wheels, each checked against its hash.
python -m pip download --no-cache-dir --require-hashes --only-binary :all: --no-deps \
    --dest "$WHEELS" --requirement requirements/server.lock
cp requirements/server.lock "$WHEELS/server.lock"
# The client (the contract module) and the server; the development cluster is not here.
python -m pip wheel --no-cache-dir --no-deps --wheel-dir "$WHEELS" ./client ./server
BUILD

# -- 2: the runtime -----------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.3.0
ARG REVISION=unknown
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="trainjob-status" \
      org.opencontainers.image.description="Status ingest server for Kubeflow Trainer TrainJobs" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}"
ENV VENV=/opt/trainjob-status \
    WHEELS=/wheels
# The wheels are mounted for this step only: none of them stays in a layer.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels <<'INSTALL'
set -eu
# No installer in the runtime's virtualenv (neither pip nor setuptools): the base image's
# pip installs into it from outside.
python -m venv --without-pip "$VENV"
install() { python -m pip --python "$VENV/bin/python" install --no-cache-dir --no-index "$@"; }
# Offline (--no-index): the locked wheels, checked against their hashes again, then the
# client's and the server's, whose requirements the lock must satisfy (pip check).
# Bytecode is compiled now, since a read-only root filesystem cannot take it later.
install --find-links "$WHEELS" --require-hashes --no-deps --requirement "$WHEELS/server.lock"
install --no-deps "$WHEELS"/trainjob_status-*.whl "$WHEELS"/trainjob_status_server-*.whl
python -m pip --python "$VENV/bin/python" check
INSTALL
# The base image's own installer and build backends are not needed to run either.
RUN python -m pip uninstall --yes pip setuptools wheel \
 && rm -rf /root/.cache /tmp/*

ENV PATH=/opt/trainjob-status/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
# A fixed UID/GID with no login (the manifests' runAsUser/runAsGroup/fsGroup match it).
USER 65532:65532
WORKDIR /tmp
# 10443: status posts (HTTPS); 9443: the pod injector (HTTPS); 9090: metrics and probes
# (HTTP); 8081: probes alone (HTTP).
EXPOSE 10443 9443 9090 8081
ENTRYPOINT ["trainjob-status-server", "serve"]
