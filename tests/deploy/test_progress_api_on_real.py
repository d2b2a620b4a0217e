"""The progress-api component on the real control plane: an overlay with it rendered, its
objects applied to kube-apiserver (the APIService, the RBAC, the binding in kube-system),
the server run with the Deployment's own args as its ServiceAccount, and
``trainjobprogresses`` read through kube-apiserver with kubectl.

The certificate bootstrap fills the APIService's caBundle (its permission is the
component's rule), the server reads the front proxy's CA through the binding in
kube-system, and a user bound to nothing but the built-in ``view`` ClusterRole in the
TrainJob's namespace reads its progress, once the reader role is aggregated into
``view``; a user without that binding, or in another namespace, is refused by the API
server, and one who may read the progress but not the TrainJobs, by the server.

What kube-controller-manager would do here is stood in for: no controller aggregates
ClusterRoles, so the test does what the clusterrole-aggregation controller does, from
``view``'s own aggregationRule; and no controller makes the Service's endpoints, so they
are made at this machine's address (the API server refuses loopback endpoints), where
the server listens. The APIService is deleted before the server stops (the suite's
clean-up reads discovery, which an APIService without its server breaks), and the
binding in kube-system with it (the clean-up leaves the system namespaces alone).
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from trainjob_devcluster.harness.pytest_plugin import require_binary
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import machine_address
from trainjob_status.contract import GROUP
from trainjob_status_server.progress import resource

from .rehearsal import Container, load, start, wait_ready
from .rendering import TARGETS, Doc, one, render
from .test_rehearsal import flag, until

pytestmark = pytest.mark.kubectl

TEAM = "team-a"
OTHER_TEAM = "team-b"
JOB = "llama"
APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"
RBAC = "rbac.authorization.k8s.io"
VIEWER, STRANGER, READER = "alice", "mallory", "bob"
AUTHENTICATION_READER = "trainjob-status-authentication-reader"
# Stands for what a cluster's Trainer install aggregates into `view` so that viewers see
# TrainJobs (Kubeflow's platform manifests aggregate them into kubeflow-view instead,
# which the reader role joins too).
TRAINJOB_VIEWER = {
    "metadata": {
        "name": "trainjobs-view",
        "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"},
    },
    "rules": [
        {
            "apiGroups": [GROUP],
            "resources": ["trainjobs"],
            "verbs": ["get", "list", "watch"],
        }
    ],
}


def endpoints(cluster: RealCluster, service: Doc, container: Container, address: str) -> None:
    """The Service's endpoints at ``address``, as the EndpointSlice controller would make
    them for a ready pod there: each Service port at the container port it targets."""
    namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
    ports = [
        {"name": p["name"], "port": container.port(p["targetPort"]), "protocol": "TCP"}
        for p in service["spec"]["ports"]
    ]
    cluster.call(
        "POST",
        f"/api/v1/namespaces/{namespace}/endpoints",
        {"metadata": {"name": name}, "subsets": [{"addresses": [{"ip": address}], "ports": ports}]},
    )
    cluster.create(
        "endpointslices",
        {
            "metadata": {
                "name": f"{name}-rehearsal",
                "labels": {"kubernetes.io/service-name": name},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": ports,
        },
        namespace,
        "discovery.k8s.io",
    )


def aggregate(cluster: RealCluster, name: str) -> None:
    """What the clusterrole-aggregation controller does for ClusterRole ``name``: its
    rules become those of every ClusterRole its aggregationRule selects, by name."""
    role = cluster.get("clusterroles", "", name, RBAC)
    assert role is not None
    selectors = [s["matchLabels"] for s in role["aggregationRule"]["clusterRoleSelectors"]]
    rules = [
        rule
        for other in sorted(
            cluster.list("clusterroles", group=RBAC), key=lambda r: r["metadata"]["name"]
        )
        if other["metadata"]["name"] != name
        and any(s.items() <= (other["metadata"].get("labels") or {}).items() for s in selectors)
        for rule in other.get("rules") or []
    ]
    cluster.call("PUT", cluster.path("clusterroles", "", name, RBAC), {**role, "rules": rules})


def bind(cluster: RealCluster, namespace: str, user: str, role: str) -> None:
    cluster.create(
        "rolebindings",
        {
            "metadata": {"name": f"{user}-{role}"},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": RBAC, "kind": "User", "name": user}],
        },
        namespace,
        RBAC,
    )


class Kubectl:
    """kubectl as the admin, or as another user (--as), with a discovery cache of its own
    (the test's APIService appears and goes within the session)."""

    def __init__(self, cluster: RealCluster, cache: Path) -> None:
        self.args = [
            require_binary("kubectl"),
            "--kubeconfig",
            str(cluster.kubeconfig_path),
            "--cache-dir",
            str(cache),
        ]

    async def __call__(self, *args: str, user: str | None = None) -> tuple[int, str, str]:
        who = [f"--as={user}"] if user is not None else []
        process = await asyncio.create_subprocess_exec(
            *self.args,
            *who,
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate()
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()


def available(cluster: RealCluster) -> bool:
    found = cluster.call("GET", f"{APISERVICES}/{resource.APISERVICE}")
    return any(
        c["type"] == "Available" and c["status"] == "True"
        for c in (found.get("status") or {}).get("conditions") or []
    )


def refusal(user: str, verb: str, name: str, group: str, plural: str, namespace: str) -> str:
    """The line kubectl prints when ``user`` may not ``verb`` ``plural`` of ``group`` in
    ``namespace``, for a read of the progress ``name`` (a list: "")."""
    target = f'{resource.QUALIFIED} "{name}"' if name else resource.QUALIFIED
    return (
        f'Error from server (Forbidden): {target} is forbidden: User "{user}" cannot {verb}'
        f' resource "{plural}" in API group "{group}" in the namespace "{namespace}"'
    )


def by_rbac(user: str, verb: str, name: str, namespace: str) -> list[str]:
    """The API server's refusal: RBAC does not let ``user`` read the progress."""
    return [refusal(user, verb, name, resource.GROUP, resource.RESOURCE, namespace)]


def by_the_server(user: str, verb: str, name: str, namespace: str) -> list[str]:
    """The server's refusal: ``user`` may ask for the progress, not read the TrainJob."""
    return [
        refusal(user, verb, name, resource.TRAINJOB_GROUP, resource.TRAINJOB_RESOURCE, namespace)
    ]


@pytest.mark.parametrize("overlay", ["quick-start", "kubeflow"])
async def test_viewers_read_progress_through_the_api_server(
    real_cluster: RealCluster, tmp_path: Path, overlay: str
) -> None:
    docs = render(overlay, "progress-api")
    container = Container(one(docs, "Deployment"))
    here = container.namespace
    assert here == TARGETS[overlay]
    apiservice = one(docs, "APIService", resource.APISERVICE)
    # The webhook is left out: the API server would call it at the Service's cluster IP,
    # which nothing routes to on a test machine.
    load(real_cluster, [d for d in docs if d["kind"] != "MutatingWebhookConfiguration"])
    # The rehearsal's loader knows no APIServices (the devcluster serves none): as kubectl
    # apply would create it.
    real_cluster.call("POST", APISERVICES, apiservice)
    address = machine_address()
    if address is None:
        pytest.fail("this machine has no address but loopback: an endpoint needs one")
    endpoints(real_cluster, one(docs, "Service"), container, address)
    real_cluster.create_trainjob(TEAM, JOB)
    real_cluster.ensure_namespace(OTHER_TEAM)
    real_cluster.create("clusterroles", TRAINJOB_VIEWER, group=RBAC)
    view = real_cluster.get("clusterroles", "", "view", RBAC)
    assert view is not None
    bind(real_cluster, TEAM, VIEWER, "view")
    bind(real_cluster, TEAM, READER, "trainjob-status-progress-reader")
    kubectl = Kubectl(real_cluster, tmp_path / "kube-cache")

    root = tmp_path / "container"
    server = start(real_cluster, container, root)
    try:
        startup = container.spec["startupProbe"]
        await wait_ready(server, container, startup["periodSeconds"] * startup["failureThreshold"])
        ca_pem = flag(container, "tls-cert-file", root).with_name("ca.crt").read_bytes()

        def ca_bundle() -> bytes:
            found = real_cluster.call("GET", f"{APISERVICES}/{resource.APISERVICE}")
            return base64.b64decode(found["spec"].get("caBundle", ""))

        await until(lambda: ca_bundle() == ca_pem, "the APIService's caBundle is the server's CA")
        await until(lambda: available(real_cluster), "the APIService is Available", 30)
        # The progress: a status the TrainJob already holds.
        trainer = {"progressPercentage": 42, "lastUpdatedTime": real_cluster.now()}
        patch = json.dumps({"status": {"trainerStatus": trainer}})
        code, _, err = await kubectl(
            "patch",
            "trainjob",
            JOB,
            "-n",
            TEAM,
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
        )
        assert code == 0, err

        async def read(user: str, *args: str) -> tuple[int, Any, list[str]]:
            code, out, err = await kubectl("get", *args, "-o", "json", user=user)
            return code, json.loads(out) if code == 0 else None, err.strip().splitlines()[-1:]

        # Before aggregation `view` grants nothing of the group: refused.
        code, _, lines = await read(VIEWER, "tjp", JOB, "-n", TEAM)
        assert (code, lines) == (1, by_rbac(VIEWER, "get", JOB, TEAM))

        aggregate(real_cluster, "view")
        # Authorization follows an RBAC change within a moment.
        for _ in range(50):
            code, progress, lines = await read(VIEWER, "tjp", JOB, "-n", TEAM)
            if code == 0:
                break
            await asyncio.sleep(0.1)
        assert code == 0, lines
        assert progress["kind"] == resource.KIND
        assert progress["metadata"]["namespace"] == TEAM
        assert progress["trainerStatus"]["progressPercentage"] == 42
        code, listed, lines = await read(VIEWER, resource.RESOURCE, "-n", TEAM)
        assert code == 0, lines
        assert [item["metadata"]["name"] for item in listed["items"]] == [JOB]
        # Refused by the API server: no binding at all, or none in that namespace.
        code, _, lines = await read(STRANGER, "tjp", JOB, "-n", TEAM)
        assert (code, lines) == (1, by_rbac(STRANGER, "get", JOB, TEAM))
        code, _, lines = await read(VIEWER, "tjp", "-n", OTHER_TEAM)
        assert (code, lines) == (1, by_rbac(VIEWER, "list", "", OTHER_TEAM))
        # Refused by the server: the reader role alone lets one ask, not read the TrainJob.
        code, _, lines = await read(READER, "tjp", JOB, "-n", TEAM)
        assert (code, lines) == (1, by_the_server(READER, "get", JOB, TEAM))
    finally:
        try:
            real_cluster.plane.request("DELETE", f"{APISERVICES}/{resource.APISERVICE}")
            # The suite's clean-up leaves kube-system alone.
            real_cluster.delete("rolebindings", "kube-system", AUTHENTICATION_READER, RBAC)
            current = real_cluster.get("clusterroles", "", "view", RBAC)
            assert current is not None
            restored = {**current, "rules": view.get("rules") or []}
            real_cluster.call("PUT", real_cluster.path("clusterroles", "", "view", RBAC), restored)
        finally:
            exit_code = server.stop()
    assert apiservice["spec"]["service"] == {
        "name": "trainjob-status",
        "namespace": here,
        "port": 8445,
    }
    log = server.log_text()
    assert exit_code == 0, log
    assert "Traceback" not in log
    records = server.log_lines()
    assert [r for r in records if r["level"] in ("error", "critical")] == []
    events = {r["msg"] for r in records}
    assert {"apiservice caBundle updated", "front proxy settings read"} <= events, events
