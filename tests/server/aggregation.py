"""The aggregated API registered on the real control plane as the chart registers it:
an APIService, its Service and endpoints at this machine's address (the API server
refuses loopback endpoints), and reads through kube-apiserver."""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp

from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import eventually
from trainjob_status_server.config import Config
from trainjob_status_server.progress import resource

from .conftest import NS, ServingCerts
from .replicas import SERVER_NS

APISERVICE = resource.APISERVICE
APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"
SERVICE_PORT = 8445
PROGRESS = f"/apis/{resource.GROUP_VERSION}/namespaces/{NS}/{resource.RESOURCE}"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def register(kube_api: RealCluster, certs: ServingCerts, address: str, port: int) -> None:
    """The chart's APIService, Service and endpoints, for a server at ``address:port``."""
    kube_api.ensure_namespace(SERVER_NS)
    name = Config.service_name
    kube_api.call(
        "POST",
        f"/api/v1/namespaces/{SERVER_NS}/services",
        {
            "metadata": {"name": name},
            "spec": {"ports": [{"name": "progress-api", "port": SERVICE_PORT, "targetPort": port}]},
        },
    )
    kube_api.call(
        "POST",
        f"/api/v1/namespaces/{SERVER_NS}/endpoints",
        {
            "metadata": {"name": name},
            "subsets": [
                {"addresses": [{"ip": address}], "ports": [{"name": "progress-api", "port": port}]}
            ],
        },
    )
    kube_api.call(
        "POST",
        f"/apis/discovery.k8s.io/v1/namespaces/{SERVER_NS}/endpointslices",
        {
            "metadata": {
                "name": f"{name}-progress",
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "progress-api", "port": port, "protocol": "TCP"}],
        },
    )
    add_apiservice(kube_api, certs)


def add_apiservice(kube_api: RealCluster, certs: ServingCerts) -> None:
    """The APIService alone, for the Service ``register`` made (again after
    ``unregister``)."""
    kube_api.call(
        "POST",
        APISERVICES,
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": APISERVICE},
            "spec": {
                "group": resource.GROUP,
                "version": resource.VERSION,
                "service": {
                    "namespace": SERVER_NS,
                    "name": Config.service_name,
                    "port": SERVICE_PORT,
                },
                "caBundle": base64.b64encode(certs.ca.cert_pem).decode(),
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    )


def available(kube_api: RealCluster) -> bool:
    found = kube_api.call("GET", f"{APISERVICES}/{APISERVICE}")
    return any(
        condition["type"] == "Available" and condition["status"] == "True"
        for condition in found.get("status", {}).get("conditions", [])
    )


async def soon(check: Any, what: str, within: float = 20.0) -> None:
    """``check()`` (not awaited) true within ``within`` seconds."""

    async def checked() -> bool:
        return bool(check())

    await eventually(checked, what, within)


def unregister(kube_api: RealCluster) -> None:
    """The APIService goes before its server: the suite's clean-up reads discovery."""
    kube_api.plane.request("DELETE", f"{APISERVICES}/{APISERVICE}")


async def through_api_server(
    kube_api: RealCluster, path: str, *, user: str | None = None, accept: str = "application/json"
) -> tuple[int, Any]:
    """A GET through kube-apiserver as the admin, or as ``user`` (impersonated); awaited,
    as the server answering it runs on this loop."""
    headers = {"Authorization": f"Bearer {kube_api.admin_token}", "Accept": accept}
    if user is not None:
        headers["Impersonate-User"] = user
    connector = aiohttp.TCPConnector(ssl=kube_api.client_ssl_context())
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(kube_api.url + path, headers=headers) as answer,
    ):
        return answer.status, json.loads(await answer.read())
