import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest_asyncio

from trainjob_devcluster import DevCluster

TJ = "/apis/trainer.kubeflow.org/v1alpha1"


def bad_request(message: str) -> dict[str, Any]:
    """The Status body of a 400 as kube-apiserver writes it (members in its order)."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "BadRequest",
        "code": 400,
    }


class Api:
    """A thin HTTP client for tests: real sockets, TLS verified against the cluster CA."""

    def __init__(self, cluster: DevCluster, session: aiohttp.ClientSession) -> None:
        self.cluster = cluster
        self.session = session

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        token: str | None = "admin",
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> tuple[int, Any, aiohttp.ClientResponse]:
        sent = dict(headers or {})
        if token == "admin":
            sent["Authorization"] = f"Bearer {self.cluster.admin_token}"
        elif token is not None:
            sent["Authorization"] = f"Bearer {token}"
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
        if data is not None:
            sent["Content-Type"] = content_type
        async with self.session.request(
            method, self.cluster.url + path, data=data, headers=sent
        ) as response:
            text = await response.read()
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = text.decode()
            return response.status, parsed, response


@pytest_asyncio.fixture
async def api(devcluster: DevCluster) -> AsyncIterator[Api]:
    connector = aiohttp.TCPConnector(ssl=devcluster.client_ssl_context())
    async with aiohttp.ClientSession(connector=connector) as session:
        yield Api(devcluster, session)
