"""The real kubectl binary against the devcluster: the commands users and docs rely on,
and a clear refusal for those it does not serve (protobuf bodies, impersonation)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

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
    # kubectl asks for aggregated discovery first and falls back to the legacy documents.
    resources = await kubectl.ok("api-resources", "--no-headers", "-o", "name")
    for name in ("pods", "namespaces", "serviceaccounts", "trainjobs.trainer.kubeflow.org"):
        assert name in resources.split()


async def test_apply_without_openapi_validation_get_label_delete(
    kubectl: Kubectl, devcluster: DevCluster
) -> None:
    namespace = "apiVersion: v1\nkind: Namespace\nmetadata: {name: team-a}\n"
    no_openapi = await kubectl.run("apply", "-f", "-", stdin=namespace)
    assert no_openapi.code == 1
    assert "failed to download openapi" in no_openapi.err
    assert "--validate=false" in no_openapi.err
    apply = ("apply", "--validate=false", "-f", "-")
    assert await kubectl.ok(*apply, stdin=namespace) == "namespace/team-a created\n"
    assert await kubectl.ok(*apply, stdin=TRAINJOB) == "trainjob.trainer.kubeflow.org/tj1 created\n"
    assert (
        await kubectl.ok(*apply, stdin=TRAINJOB) == "trainjob.trainer.kubeflow.org/tj1 unchanged\n"
    )
    changed = TRAINJOB.replace("team: a", "team: b")
    assert (
        await kubectl.ok(*apply, stdin=changed) == "trainjob.trainer.kubeflow.org/tj1 configured\n"
    )
    stored = devcluster.get("trainjobs", "team-a", "tj1", GROUP)
    assert stored is not None
    assert stored["metadata"]["labels"] == {"team": "b"}
    # No Table from the server: kubectl prints its own default columns.
    table = await kubectl.ok("get", "trainjobs", "-A")
    assert table.splitlines()[0].split() == ["NAMESPACE", "NAME", "AGE"]
    assert table.splitlines()[1].split()[:2] == ["team-a", "tj1"]
    as_yaml = yaml.safe_load(
        await kubectl.ok("get", "trainjob", "tj1", "-n", "team-a", "-o", "yaml")
    )
    assert as_yaml["kind"] == "TrainJob"
    path = await kubectl.ok(
        "get", "trainjob", "tj1", "-n", "team-a", "-o", "jsonpath={.spec.runtimeRef.name}"
    )
    assert path == "torch-distributed"
    described = await kubectl.ok("describe", "trainjob", "tj1", "-n", "team-a")
    assert "Name:         tj1" in described
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
    missing = await kubectl.run("get", "trainjob", "tj1", "-n", "team-a")
    assert missing.code == 1
    assert missing.err == (
        'Error from server (NotFound): trainjobs.trainer.kubeflow.org "tj1" not found\n'
    )


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
    assert lines[0].split() == ["NAME", "AGE"]
    assert [line.split()[0] for line in lines[1:]] == ["tj1", "tj1"]


async def test_typed_creates_are_refused_as_protobuf(
    kubectl: Kubectl, devcluster: DevCluster
) -> None:
    """kubectl's typed generators send protobuf and never retry as JSON: the answer says
    what to do instead, and nothing is created."""
    refused = await kubectl.run("create", "namespace", "team-a")
    assert refused.code == 1
    assert refused.err == (
        "Error from server (UnsupportedMediaType): the development cluster speaks JSON only, "
        "not application/vnd.kubernetes.protobuf: send the object as JSON or YAML "
        "(kubectl: apply --validate=false -f)\n"
    )
    assert devcluster.get("namespaces", "", "team-a") is None


async def test_can_i_as_another_user_is_refused_not_answered(kubectl: Kubectl) -> None:
    """``--as`` is impersonation, which the devcluster does not serve: never a "yes" on the
    admin's behalf (tests/differential compares it with the real "no")."""
    args = ("auth", "can-i", "get", "/metrics", "--as", "system:serviceaccount:monitoring:default")
    refused = await kubectl.run(*args)
    assert (refused.code, refused.out) == (1, "")
    assert refused.err == (
        "Error from server (Forbidden): the development cluster does not serve impersonation "
        "(Impersonate-User header): use a real API server to act as another user\n"
    )


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
