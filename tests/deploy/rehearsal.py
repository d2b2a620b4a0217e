"""The deployment rehearsal's parts (helpers, no tests): a rendered overlay loaded into the
devcluster, and the server started exactly as its Deployment's container would be.

What kubelet and the cluster would provide is stood in for, and nothing else: every
absolute path the container names (args, env values, volume mounts) lives under one
temporary root, ``fieldRef`` values come from the pod's metadata, a projected token is
requested for its audience as kubelet requests it, and the in-cluster
API access is a kubeconfig holding the Deployment's ServiceAccount token (given as
``TRAINJOB_STATUS_KUBECONFIG``, the only variable the Deployment does not set). The
command is the image's ENTRYPOINT from the Dockerfile followed by the container's args.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from trainjob_devcluster.harness.kubeconfig import write_kubeconfig
from trainjob_devcluster.harness.pytest_plugin import KubeAPI

from .rendering import ROOT, Doc

# The kinds the rehearsal loads, as (plural, API group). The Deployment itself is what
# the rehearsal runs; the NetworkPolicy and PodDisruptionBudget have no effect here.
APPLIED = {
    "Namespace": ("namespaces", ""),
    "ServiceAccount": ("serviceaccounts", ""),
    "Service": ("services", ""),
    "ClusterRole": ("clusterroles", "rbac.authorization.k8s.io"),
    "ClusterRoleBinding": ("clusterrolebindings", "rbac.authorization.k8s.io"),
    "Role": ("roles", "rbac.authorization.k8s.io"),
    "RoleBinding": ("rolebindings", "rbac.authorization.k8s.io"),
    "MutatingWebhookConfiguration": (
        "mutatingwebhookconfigurations",
        "admissionregistration.k8s.io",
    ),
}
POD_NAME = "trainjob-status-5d9c7b6f4-x2x7q"
POD_IP = "127.0.0.1"


def entrypoint() -> list[str]:
    """The image's ENTRYPOINT (exec form) from the Dockerfile."""
    text = (ROOT / "Dockerfile").read_text()
    found = re.search(r"^ENTRYPOINT\s+(\[.*\])\s*$", text, re.MULTILINE)
    assert found, "the Dockerfile has no exec-form ENTRYPOINT"
    command: list[str] = json.loads(found.group(1))
    return command


def load(cluster: KubeAPI, docs: list[Doc]) -> None:
    """Create the rendered objects the server's start depends on, as ``kubectl apply``
    would (the namespace first)."""
    ordered = sorted(docs, key=lambda d: d["kind"] != "Namespace")
    for doc in ordered:
        if doc["kind"] not in APPLIED:
            continue
        plural, group = APPLIED[doc["kind"]]
        namespace = doc["metadata"].get("namespace", "")
        if plural == "namespaces" and cluster.get("namespaces", "", doc["metadata"]["name"]):
            continue
        if namespace:
            cluster.ensure_namespace(namespace)
        cluster.create(plural, doc, namespace, group)


def under(root: Path, text: str) -> str:
    """``text`` with an absolute path (alone or after ``--flag=``) moved under ``root``."""
    flag, eq, value = text.partition("=")
    if eq and flag.startswith("--") and value.startswith("/"):
        return f"{flag}={root}{value}"
    return f"{root}{text}" if text.startswith("/") else text


@dataclass
class Container:
    """The server's container of a rendered Deployment."""

    deployment: Doc
    spec: Doc = field(init=False)

    def __post_init__(self) -> None:
        containers = self.deployment["spec"]["template"]["spec"]["containers"]
        self.spec = next(c for c in containers if c["name"] == "server")

    @property
    def namespace(self) -> str:
        namespace: str = self.deployment["metadata"]["namespace"]
        return namespace

    @property
    def service_account(self) -> str:
        name: str = self.deployment["spec"]["template"]["spec"]["serviceAccountName"]
        return name

    def port(self, name_or_number: str | int) -> int:
        if isinstance(name_or_number, int):
            return name_or_number
        for entry in self.spec.get("ports") or []:
            if entry.get("name") == name_or_number:
                number: int = entry["containerPort"]
                return number
        raise AssertionError(f"the container has no port named {name_or_number!r}")

    def ports(self) -> dict[int | str, int]:
        """Target ports (names and numbers) to the ports the process listens on."""
        mapped: dict[int | str, int] = {}
        for entry in self.spec.get("ports") or []:
            mapped[entry["containerPort"]] = entry["containerPort"]
            if "name" in entry:
                mapped[entry["name"]] = entry["containerPort"]
        return mapped

    def command(self, root: Path) -> list[str]:
        assert "command" not in self.spec, "the rehearsal runs the image's ENTRYPOINT"
        program, *rest = entrypoint()
        executable = Path(sys.executable).parent / program
        return [str(executable), *rest, *(under(root, a) for a in self.spec.get("args") or [])]

    def environment(self, root: Path) -> dict[str, str]:
        meta = {
            "metadata.namespace": self.namespace,
            "metadata.name": POD_NAME,
            "status.podIP": POD_IP,
            "spec.serviceAccountName": self.service_account,
        }
        env: dict[str, str] = {}
        for entry in self.spec.get("env") or []:
            if "value" in entry:
                env[entry["name"]] = under(root, str(entry["value"]))
                continue
            source = entry["valueFrom"]
            assert set(source) == {"fieldRef"}, f"unsupported env source: {source}"
            env[entry["name"]] = meta[source["fieldRef"]["fieldPath"]]
        return env

    def make_mounts(self, root: Path, cluster: KubeAPI) -> None:
        """Each mount's folder; a projected volume's tokens in it, as kubelet writes them."""
        volumes = {v["name"]: v for v in self.deployment["spec"]["template"]["spec"]["volumes"]}
        for mount in self.spec.get("volumeMounts") or []:
            folder = root / mount["mountPath"].lstrip("/")
            folder.mkdir(parents=True, exist_ok=True)
            projected = volumes[mount["name"]].get("projected") or {}
            for source in projected.get("sources") or []:
                request = source["serviceAccountToken"]
                token = cluster.request_token(
                    self.namespace,
                    self.service_account,
                    [request["audience"]],
                    pod=None,
                    expiration_seconds=request["expirationSeconds"],
                )
                (folder / request["path"]).write_text(token)

    def probe(self, kind: str) -> tuple[int, str]:
        """(port, path) of the container's HTTP probe ``kind`` (e.g. readinessProbe)."""
        get = self.spec[kind]["httpGet"]
        return self.port(get["port"]), get["path"]


@dataclass
class RunningServer:
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_lines(self) -> list[dict[str, Any]]:
        lines = self.log_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def log_text(self) -> str:
        return self.log_path.read_text()

    def stop(self, within: float = 30.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(within)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError("the server did not stop on SIGTERM") from None
        return self.process.returncode


def start(cluster: KubeAPI, container: Container, root: Path) -> RunningServer:
    """Run the container's command with its environment, as its ServiceAccount."""
    container.make_mounts(root, cluster)
    token = cluster.request_token(
        container.namespace, container.service_account, [cluster.issuer], pod=None
    )
    kubeconfig = write_kubeconfig(
        root / "in-cluster.kubeconfig", cluster.url, cluster.ca.cert_pem, token
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINJOB_STATUS_")}
    env.update(container.environment(root))
    env["TRAINJOB_STATUS_KUBECONFIG"] = str(kubeconfig)
    log_path = root / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            container.command(root), env=env, stdout=log, stderr=subprocess.STDOUT
        )
    return RunningServer(process, log_path)


async def wait_ready(server: RunningServer, container: Container, within: float) -> None:
    """Until the readiness probe answers 200 (as kubelet would ask it), or fail with the
    server's log if it exits or the time is up."""
    port, path = container.probe("readinessProbe")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    async with aiohttp.ClientSession() as session:
        while loop.time() < deadline:
            if server.process.poll() is not None:
                raise AssertionError(
                    f"the server exited with {server.process.returncode}:\n{server.log_text()}"
                )
            try:
                async with session.get(f"http://127.0.0.1:{port}{path}") as answer:
                    if answer.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    server.stop()
    raise AssertionError(f"not ready within {within:g}s:\n{server.log_text()}")
