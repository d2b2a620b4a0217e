"""The real kubectl binary against the devcluster: the commands users and docs rely on."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import jwt
import pytest
import pytest_asyncio
import yaml

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.testing import eventually

pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

GROUP = "trainer.kubeflow.org"
RBAC = "rbac.authorization.k8s.io"
TRAINJOB = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata:
  name: tj1
  namespace: team-a
  labels:
    team: a
spec:
  runtimeRef:
    name: torch-distributed
"""


@dataclass
class Result:
    code: int
    out: str
    err: str


class Kubectl:
    def __init__(self, cluster: DevCluster, home: Path) -> None:
        self.cluster = cluster
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "KUBECONFIG": str(cluster.kubeconfig_path),
        }
        self.cache = str(home / "cache")

    async def run(self, *args: str, stdin: str | None = None) -> Result:
        # Run without blocking the event loop: the cluster serves from this same loop.
        proc = await asyncio.create_subprocess_exec(
            "kubectl",
            f"--cache-dir={self.cache}",
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
        )
        out, err = await proc.communicate(stdin.encode() if stdin is not None else None)
        assert proc.returncode is not None
        return Result(proc.returncode, out.decode(), err.decode())

    async def ok(self, *args: str, stdin: str | None = None) -> str:
        result = await self.run(*args, stdin=stdin)
        assert result.code == 0, result.err
        return result.out


@pytest_asyncio.fixture
async def kubectl(devcluster: DevCluster, tmp_path: Path) -> Kubectl:
    return Kubectl(devcluster, tmp_path)


async def test_version_and_api_resources(kubectl: Kubectl) -> None:
    out = await kubectl.ok("version", "-o", "json")
    assert json.loads(out)["serverVersion"]["minor"] == "32"
    resources = await kubectl.ok("api-resources", "--no-headers", "-o", "name")
    for name in ("pods", "namespaces", "serviceaccounts", "trainjobs.trainer.kubeflow.org"):
        assert name in resources.split()


async def test_create_namespace_serviceaccount_configmap_secret(
    kubectl: Kubectl, devcluster: DevCluster
) -> None:
    # kubectl's typed clients send these as protobuf.
    assert await kubectl.ok("create", "namespace", "team-a") == "namespace/team-a created\n"
    assert (
        await kubectl.ok("create", "serviceaccount", "trainer", "-n", "team-a")
        == "serviceaccount/trainer created\n"
    )
    await kubectl.ok("create", "configmap", "cm", "-n", "team-a", "--from-literal=k=v")
    await kubectl.ok("create", "secret", "generic", "s", "-n", "team-a", "--from-literal=k=v")
    assert devcluster.get("namespaces", "", "team-a") is not None
    sa = devcluster.get("serviceaccounts", "team-a", "trainer")
    assert sa is not None
    assert sa["metadata"]["uid"]
    cm = devcluster.get("configmaps", "team-a", "cm")
    assert cm is not None
    assert cm["data"] == {"k": "v"}
    secret = devcluster.get("secrets", "team-a", "s")
    assert secret is not None
    assert secret["data"] == {"k": base64.b64encode(b"v").decode()}
    names = await kubectl.ok(
        "get", "sa", "-n", "team-a", "-o", "jsonpath={.items[*].metadata.name}"
    )
    assert names.split() == ["default", "trainer"]


async def test_create_namespace_twice_is_already_exists(kubectl: Kubectl) -> None:
    await kubectl.ok("create", "namespace", "team-a")
    again = await kubectl.run("create", "namespace", "team-a")
    assert again.code == 1
    assert again.err == 'Error from server (AlreadyExists): namespaces "team-a" already exists\n'


async def test_create_token_bound_to_pod(kubectl: Kubectl, devcluster: DevCluster) -> None:
    devcluster.ensure_namespace("team-a")
    pod = devcluster.create_pod("team-a", "tj1-node-0-0", service_account="default")
    args = [
        "create", "token", "default", "-n", "team-a",
        "--audience", "trainer.kubeflow.org/team-a/tj1",
        "--duration", "3600s",
        "--bound-object-kind", "Pod",
        "--bound-object-name", "tj1-node-0-0",
        "--bound-object-uid", pod["metadata"]["uid"],
    ]  # fmt: skip
    token = (await kubectl.ok(*args)).strip()
    header = jwt.get_unverified_header(token)
    claims = jwt.decode(token, options={"verify_signature": False})
    assert header["alg"] == "RS256"
    assert header["kid"] in [key["kid"] for key in devcluster.keys.jwks()["keys"]]
    assert claims["aud"] == ["trainer.kubeflow.org/team-a/tj1"]
    assert claims["exp"] - claims["iat"] == 3600
    assert claims["sub"] == "system:serviceaccount:team-a:default"
    assert claims["kubernetes.io"]["pod"] == {
        "name": "tj1-node-0-0",
        "uid": pod["metadata"]["uid"],
    }
    wrong = await kubectl.run(*args[:-1], "not-the-uid")
    assert wrong.code == 1
    assert "the UID in the bound object reference (not-the-uid) does not match" in wrong.err


async def test_apply_client_side_then_server_side(kubectl: Kubectl, devcluster: DevCluster) -> None:
    devcluster.ensure_namespace("team-a")
    assert (
        await kubectl.ok("apply", "-f", "-", stdin=TRAINJOB)
        == "trainjob.trainer.kubeflow.org/tj1 created\n"
    )
    assert (
        await kubectl.ok("apply", "-f", "-", stdin=TRAINJOB)
        == "trainjob.trainer.kubeflow.org/tj1 unchanged\n"
    )
    changed = TRAINJOB.replace("team: a", "team: b")
    assert (
        await kubectl.ok("apply", "-f", "-", stdin=changed)
        == "trainjob.trainer.kubeflow.org/tj1 configured\n"
    )
    assert (
        await kubectl.ok("apply", "--server-side", "-f", "-", stdin=changed)
        == "trainjob.trainer.kubeflow.org/tj1 serverside-applied\n"
    )
    stored = devcluster.get("trainjobs", "team-a", "tj1", GROUP)
    assert stored is not None
    assert stored["metadata"]["labels"] == {"team": "b"}
    # The CRD's defaults were applied on create.
    assert stored["spec"]["runtimeRef"] == {
        "apiGroup": GROUP,
        "kind": "ClusterTrainingRuntime",
        "name": "torch-distributed",
    }
    managers = {e["manager"]: e for e in stored["metadata"]["managedFields"]}
    assert managers["kubectl"]["operation"] == "Apply"
    assert managers["kubectl-client-side-apply"]["operation"] == "Update"


async def test_get_formats_describe_label_delete(kubectl: Kubectl, devcluster: DevCluster) -> None:
    devcluster.ensure_namespace("team-a")
    await kubectl.ok("apply", "-f", "-", stdin=TRAINJOB)
    table = await kubectl.ok("get", "trainjobs", "-n", "team-a")
    assert table.splitlines()[0].split() == ["NAME", "STATE", "AGE"]
    assert table.splitlines()[1].split()[0] == "tj1"
    as_yaml = yaml.safe_load(
        await kubectl.ok("get", "trainjob", "tj1", "-n", "team-a", "-o", "yaml")
    )
    assert as_yaml["kind"] == "TrainJob"
    assert as_yaml["metadata"]["generation"] == 1
    as_json = json.loads(await kubectl.ok("get", "trainjob", "tj1", "-n", "team-a", "-o", "json"))
    assert as_json["metadata"]["uid"] == as_yaml["metadata"]["uid"]
    path = await kubectl.ok(
        "get", "trainjob", "tj1", "-n", "team-a", "-o", "jsonpath={.spec.runtimeRef.kind}"
    )
    assert path == "ClusterTrainingRuntime"
    described = await kubectl.ok("describe", "trainjob", "tj1", "-n", "team-a")
    assert "Name:         tj1" in described
    assert "Runtime Ref:" in described
    assert "Events:" in described
    assert (
        await kubectl.ok("label", "trainjob", "tj1", "-n", "team-a", "stage=eval")
        == "trainjob.trainer.kubeflow.org/tj1 labeled\n"
    )
    selected = await kubectl.ok("get", "trainjobs", "-A", "-l", "stage=eval", "-o", "name")
    assert selected == "trainjob.trainer.kubeflow.org/tj1\n"
    assert (
        await kubectl.ok("delete", "trainjob", "tj1", "-n", "team-a")
        == 'trainjob.trainer.kubeflow.org "tj1" deleted\n'
    )
    assert devcluster.get("trainjobs", "team-a", "tj1", GROUP) is None
    missing = await kubectl.run("get", "trainjob", "tj1", "-n", "team-a")
    assert missing.code == 1
    assert missing.err == (
        'Error from server (NotFound): trainjobs.trainer.kubeflow.org "tj1" not found\n'
    )


async def test_get_pods_shows_phase_set_by_test(kubectl: Kubectl, devcluster: DevCluster) -> None:
    devcluster.ensure_namespace("team-a")
    devcluster.create_pod("team-a", "p")
    assert (await kubectl.ok("get", "pod", "p", "-n", "team-a", "--no-headers")).split()[2] == (
        "Pending"
    )
    devcluster.set_pod_phase("team-a", "p", "Running")
    phase = await kubectl.ok("get", "pod", "p", "-n", "team-a", "-o", "jsonpath={.status.phase}")
    assert phase == "Running"


async def test_get_watch_prints_rows_for_each_change(
    kubectl: Kubectl, devcluster: DevCluster
) -> None:
    devcluster.ensure_namespace("team-a")
    before = devcluster.faults.count("watch", "trainjobs")
    watching = asyncio.create_task(
        kubectl.run("get", "trainjobs", "-n", "team-a", "-w", "--request-timeout=3s")
    )

    async def watch_asked() -> bool:
        return devcluster.faults.count("watch", "trainjobs") > before

    # kubectl lists, prints, then watches from the list's resourceVersion.
    await eventually(watch_asked, "kubectl's watch request", within=30, every=0.02)
    devcluster.create_trainjob("team-a", "tj1")
    await kubectl.ok("label", "trainjob", "tj1", "-n", "team-a", "x=y")
    result = await watching
    lines = result.out.splitlines()
    assert lines[0].split() == ["NAME", "STATE", "AGE"]
    assert [line.split()[0] for line in lines[1:]] == ["tj1", "tj1"]


async def test_unauthenticated_kubectl_is_rejected(
    kubectl: Kubectl, devcluster: DevCluster, tmp_path: Path
) -> None:
    config = yaml.safe_load(devcluster.kubeconfig_path.read_text())
    config["users"][0]["user"]["token"] = "not-a-token"
    bad = tmp_path / "bad.kubeconfig"
    bad.write_text(yaml.safe_dump(config))
    result = await kubectl.run("--kubeconfig", str(bad), "get", "namespaces")
    assert result.code == 1
    assert result.err.strip().endswith(
        "error: You must be logged in to the server (the server has asked for the client "
        "to provide credentials)"
    )


async def test_create_rbac_objects_as_the_docs_ask(
    kubectl: Kubectl, devcluster: DevCluster
) -> None:
    """kubectl sends these as protobuf too: the binding docs/kubeflow.md asks for."""
    await kubectl.ok("create", "namespace", "team-a")
    assert (
        await kubectl.ok(
            "create", "clusterrole", "metrics", "--verb=get", "--non-resource-url=/metrics"
        )
        == "clusterrole.rbac.authorization.k8s.io/metrics created\n"
    )
    assert (
        await kubectl.ok(
            "create",
            "clusterrolebinding",
            "scrape",
            "--clusterrole=metrics",
            "--serviceaccount=monitoring:prometheus",
        )
        == "clusterrolebinding.rbac.authorization.k8s.io/scrape created\n"
    )
    await kubectl.ok("create", "role", "r", "-n", "team-a", "--verb=get", "--resource=configmaps")
    await kubectl.ok("create", "rolebinding", "rb", "-n", "team-a", "--role=r", "--user=jane")
    binding = devcluster.get("clusterrolebindings", "", "scrape", RBAC)
    assert binding is not None
    assert binding["roleRef"] == {"apiGroup": RBAC, "kind": "ClusterRole", "name": "metrics"}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}
    ]
    role = devcluster.get("clusterroles", "", "metrics", RBAC)
    assert role is not None
    assert role["rules"] == [{"verbs": ["get"], "nonResourceURLs": ["/metrics"]}]
    rolebinding = devcluster.get("rolebindings", "team-a", "rb", RBAC)
    assert rolebinding is not None
    assert rolebinding["subjects"] == [{"kind": "User", "apiGroup": RBAC, "name": "jane"}]


async def test_auth_can_i_asks_a_self_subject_access_review(
    kubectl: Kubectl, devcluster: DevCluster
) -> None:
    assert await kubectl.ok("auth", "can-i", "get", "pods") == "yes\n"
    devcluster.ensure_namespace("team-a")
    devcluster.create("serviceaccounts", {"metadata": {"name": "nobody"}}, "team-a")
    token = devcluster.request_token("team-a", "nobody", [devcluster.issuer])
    refused = await kubectl.run("auth", "can-i", "get", "pods", "--token", token)
    assert (refused.code, refused.out) == (1, "no\n")


async def test_auth_whoami_is_a_self_subject_review(
    kubectl: Kubectl, devcluster: DevCluster
) -> None:
    review = json.loads(await kubectl.ok("auth", "whoami", "-o", "json"))
    assert review["status"]["userInfo"] == {
        "username": "devcluster-admin",
        "groups": ["system:masters", "system:authenticated"],
    }
    devcluster.ensure_namespace("team-a")
    devcluster.create("serviceaccounts", {"metadata": {"name": "trainer"}}, "team-a")
    token = devcluster.request_token("team-a", "trainer", [devcluster.issuer])
    out = await kubectl.ok(
        "auth", "whoami", "--token", token, "-o", "jsonpath={.status.userInfo.username}"
    )
    assert out == "system:serviceaccount:team-a:trainer"


async def test_auth_can_i_list_is_a_self_subject_rules_review(
    kubectl: Kubectl, devcluster: DevCluster
) -> None:
    devcluster.ensure_namespace("team-a")
    devcluster.create("serviceaccounts", {"metadata": {"name": "trainer"}}, "team-a")
    devcluster.create(
        "roles",
        {
            "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
        },
        "team-a",
        RBAC,
    )
    devcluster.create(
        "rolebindings",
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "trainer", "namespace": "team-a"}],
        },
        "team-a",
        RBAC,
    )
    token = devcluster.request_token("team-a", "trainer", [devcluster.issuer])
    out = await kubectl.ok("auth", "can-i", "--list", "-n", "team-a", "--token", token)
    rows = [line.split() for line in out.splitlines()[1:]]
    assert ["configmaps", "[]", "[]", "[get]"] in rows
    assert ["[/openid/v1/jwks]", "[]", "[get]"] in rows
    assert not any(row[0] == "*.*" for row in rows)
    # Only in the namespace the role is bound in.
    elsewhere = await kubectl.ok("auth", "can-i", "--list", "-n", "default", "--token", token)
    assert "configmaps" not in elsewhere
