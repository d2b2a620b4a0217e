# syntax=docker/dockerfile:1.7
#
# The trainjob-status server image: a slim Python 3.11 runtime with the server installed
# in a virtualenv, run as a fixed non-root user, fit for a read-only root filesystem.
#
#   docker build -t trainjob-status:0.2.0 .
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
RUN <<'BUILD'
set -eu
# The client (the contract module) and the server; the development cluster is not here.
python -m pip wheel --no-cache-dir --wheel-dir "$WHEELS" ./client ./server
BUILD

# -- 2: the runtime -----------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ENV VENV=/opt/trainjob-status \
    WHEELS=/wheels
# The wheels are mounted for this step only: none of them stays in a layer.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels <<'INSTALL'
set -eu
python -m venv "$VENV"
# Offline (--no-index): exactly the wheels built above. Bytecode is compiled now, since
# a read-only root filesystem cannot take it later.
"$VENV/bin/python" -m pip install --no-cache-dir --no-index --find-links "$WHEELS" \
    trainjob-status-server
# Nothing installs anything at run time.
"$VENV/bin/python" -m pip uninstall --yes pip
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
# 10443: status posts and the pod injector (HTTPS); 9090: metrics and probes (HTTP);
# 8081: probes alone (HTTP).
EXPOSE 10443 9090 8081
ENTRYPOINT ["trainjob-status-server", "serve"]
