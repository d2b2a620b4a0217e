"""Fixtures for tests of the client against our real server and the devcluster, with a
pod's environment (real token, CA file, status URL); the sink's fixtures come along."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from client.conftest import make_reporter as make_reporter
from client.conftest import sink as sink
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, MakeStatusServer
from trainjob_devcluster.harness.testing import ServingCerts
from trainjob_status.contract import (
    CA_CERT_ENV,
    GROUP,
    TOKEN_ENV,
    URL_ENV,
    audience,
    status_path,
)
from trainjob_status_server.app import StatusServer
from trainjob_status_server.auth import AuthSettings, TokenAuthenticator

NS = "team-a"
JOB = "job1"

# -- our server against the devcluster ----------------------------------------------------


@pytest_asyncio.fixture
async def server(
    make_status_server: MakeStatusServer, kube_api: KubeAPI
) -> AsyncIterator[StatusServer]:
    """Our server with its real token checks (the API server's issuer and keys); each post
    is answered once written, so a test reads the TrainJob after a flush."""
    authenticator = TokenAuthenticator(AuthSettings(issuer=kube_api.issuer, own_token_path=None))
    async with make_status_server(authenticator=authenticator, write_mode="direct") as running:
        yield running


@dataclass
class Pod:
    """What the injector gives a TrainJob's pod: the three variables and their files."""

    url: str
    token_file: Path
    ca_file: Path
    token: str

    @property
    def environ(self) -> dict[str, str]:
        return {
            URL_ENV: self.url,
            TOKEN_ENV: str(self.token_file),
            CA_CERT_ENV: str(self.ca_file),
        }


@pytest.fixture
def pod(
    server: StatusServer,
    kube_api: KubeAPI,
    serving_certs: ServingCerts,
    tmp_path: Path,
) -> Pod:
    """TrainJob team-a/job1, one of its pods, and that pod's projected token."""
    kube_api.create_trainjob(NS, JOB)
    kube_api.create_trainjob_pod(NS, JOB, f"{JOB}-node-0-0")
    token = kube_api.request_token(NS, "default", [audience(NS, JOB)], pod=f"{JOB}-node-0-0")
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "token").write_text(token)
    (secrets / "ca.crt").write_bytes(serving_certs.ca.cert_pem)
    # The URL names the server as the injector does: a DNS name its certificate holds.
    url = server.url.replace("127.0.0.1", "localhost") + status_path(NS, JOB)
    return Pod(url, secrets / "token", secrets / "ca.crt", token)


def stored_status(cluster: KubeAPI, name: str = JOB) -> dict[str, Any] | None:
    obj = cluster.get("trainjobs", NS, name, GROUP)
    assert obj is not None
    status = obj.get("status", {}).get("trainerStatus")
    return status if isinstance(status, dict) else None
