"""Kubeflow Trainer for real on the real control plane: its CRDs and JobSet's as their Go
modules ship them, its torch-distributed ClusterTrainingRuntime, its controller manager
with the ``TrainJobStatus`` gate off or on, its status server package run alone, and our
server run as deployed (``trainjob-status-server serve``) with its pod webhook
registered in the API server. No kubelet and no JobSet controller run: pods are created
by hand from the trainer step of the JobSet the Trainer built, as the Job controller
would, and their projected token is requested as the kubelet would request it."""

from __future__ import annotations

import base64
import http.client
import json
import secrets
import socket
import ssl
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from trainjob_devcluster.harness.kubeflow_trainer import (
    GATE,
    OPERATOR_NAMESPACE,
    SERVICE_NAME,
    WEBHOOK_SECRET,
    ChildProcess,
    TrainerAssets,
    TrainerProcess,
    controller_config,
    http_ready,
    status_server_config,
    tls_ready,
    write_config,
)
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import ServingCerts, free_port
from trainjob_devcluster.harness.workloads import controller_reference
from trainjob_status import contract
from trainjob_status_server.pods.injection import VOLUME_NAME

TRAINER_API = "/apis/trainer.kubeflow.org/v1alpha1"
JOBSET_API = "/apis/jobset.x-k8s.io/v1alpha2"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
RJOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
OUR_WEBHOOK = "trainjob-status"
# The field manager both servers write trainerStatus as.
FIELD_MANAGER = "trainer-status"


def wait_for(what: str, check: Any, timeout: float = 120.0) -> Any:
    """Poll ``check()`` until it returns something truthy; that value. The bound is wide:
    Go programs and the control plane share a busy 2-core machine."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.1)


@dataclass
class Answer:
    code: int
    body: Any


def post(
    port: int,
    url: str,
    *,
    token: str,
    ca_pem: bytes,
    body: bytes,
    hostname: str | None = None,
) -> Answer:
    """POST ``body`` to ``url`` as a pod would (bearer token, the server verified with
    ``ca_pem`` under the URL's host name, or ``hostname``), reaching that host at
    127.0.0.1:``port``: the pod's cluster DNS, here."""
    parts = urlsplit(url)
    name = hostname or parts.hostname or ""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    connection = http.client.HTTPSConnection(name, port, timeout=30)
    connection.sock = context.wrap_socket(raw, server_hostname=name)
    try:
        connection.request(
            "POST", parts.path, body=body, headers={"Authorization": f"Bearer {token}"}
        )
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    try:
        decoded = json.loads(data)
    except ValueError:
        decoded = data.decode(errors="replace")
    return Answer(response.status, decoded)


def status_body(progress: int, stamp: str, **extra: Any) -> bytes:
    """A status post as the Kubeflow SDK sends it."""
    status = {"progressPercentage": progress, "lastUpdatedTime": stamp, **extra}
    return json.dumps({"trainerStatus": status}).encode()


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    container = pod["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


@dataclass
class Kubeflow:
    """The control plane with the Trainer installed (CRDs, runtime, its Secret and
    service account); starts its programs and ours against it."""

    cluster: RealCluster
    assets: TrainerAssets
    workdir: Path

    # -- the cluster ---------------------------------------------------------------------

    def install(self) -> None:
        """The Trainer's CRDs and JobSet's replace any the control plane had; then its
        namespace, the (empty) Secret its certificate management fills, the service
        account whose token the Trainer reads its issuer from, and the runtime."""
        for crd in self.assets.crds():
            self._put_crd(crd)
        self.cluster.ensure_namespace(OPERATOR_NAMESPACE)
        for plural, body in (
            ("secrets", {"metadata": {"name": WEBHOOK_SECRET}}),
            ("serviceaccounts", {"metadata": {"name": SERVICE_NAME}}),
        ):
            if self.cluster.get(plural, OPERATOR_NAMESPACE, body["metadata"]["name"]) is None:
                self.cluster.create(plural, body, OPERATOR_NAMESPACE)
        runtime = self.assets.runtime()
        path = f"{TRAINER_API}/clustertrainingruntimes"
        code, _ = self.cluster.plane.request("GET", f"{path}/{runtime['metadata']['name']}")
        if code == 404:
            self.cluster.call("POST", path, runtime)

    def _put_crd(self, crd: dict[str, Any]) -> None:
        path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
        name = crd["metadata"]["name"]
        code, found = self.cluster.plane.request("GET", f"{path}/{name}")
        if code == 200:
            crd = {**crd, "metadata": {**crd["metadata"], **_version_of(found)}}
            self.cluster.call("PUT", f"{path}/{name}", crd)
        else:
            self.cluster.call("POST", path, crd)
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("served"))
        listing = f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
        wait_for(listing, lambda: self.cluster.plane.request("GET", listing)[0] == 200)

    def create_trainjob(self, namespace: str, name: str) -> dict[str, Any]:
        self.cluster.ensure_namespace(namespace)
        body = {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": "torch-distributed"}},
        }
        created: dict[str, Any] = self.cluster.call(
            "POST", f"{TRAINER_API}/namespaces/{namespace}/trainjobs", body
        )
        return created

    def trainjob(self, namespace: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.cluster.call(
            "GET", f"{TRAINER_API}/namespaces/{namespace}/trainjobs/{name}"
        )
        return found

    def jobset(self, namespace: str, name: str) -> dict[str, Any]:
        """The JobSet the Trainer's controller built for TrainJob ``name``."""
        path = f"{JOBSET_API}/namespaces/{namespace}/jobsets/{name}"

        def built() -> dict[str, Any] | None:
            code, found = self.cluster.plane.request("GET", path)
            return found if code == 200 else None

        found: dict[str, Any] = wait_for(f"JobSet {namespace}/{name}", built)
        return found

    def trainer_pod(self, jobset: dict[str, Any], *, index: int = 0) -> dict[str, Any]:
        """A pod of the trainer step, created through the API (so through admission and
        our webhook) from the JobSet's template, labelled as JobSet and Job label it and
        owned by the step's Job (made here as the JobSet controller would, owned by the
        JobSet), so the owner chain leads to the TrainJob as in a cluster."""
        meta = jobset["metadata"]
        rjob = next(
            r
            for r in jobset["spec"]["replicatedJobs"]
            if r["template"].get("metadata", {}).get("labels", {}).get(contract.ANCESTOR_STEP_LABEL)
            == "trainer"
        )
        template = rjob["template"]["spec"]["template"]
        job = f"{meta['name']}-{rjob['name']}-0"
        labels = {
            **template.get("metadata", {}).get("labels", {}),
            JOBSET_LABEL: meta["name"],
            RJOB_LABEL: rjob["name"],
            JOB_INDEX_LABEL: "0",
            "batch.kubernetes.io/job-name": job,
        }
        owner = self.step_job(jobset, job, labels)
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{job}-{index}-{secrets.token_hex(3)}",
                "labels": labels,
                "ownerReferences": [controller_reference(owner)],
            },
            "spec": template["spec"],
        }
        created: dict[str, Any] = self.cluster.call(
            "POST", f"/api/v1/namespaces/{meta['namespace']}/pods", body
        )
        return created

    def step_job(self, jobset: dict[str, Any], name: str, labels: dict[str, str]) -> dict[str, Any]:
        """The Job ``name`` of ``jobset`` as the JobSet controller makes it (its controller
        reference the JobSet); made once, found after."""
        namespace = jobset["metadata"]["namespace"]
        found = self.cluster.get("jobs", namespace, name, "batch")
        if found is not None:
            return found
        body = {
            "metadata": {
                "name": name,
                "labels": labels,
                "ownerReferences": [controller_reference(jobset)],
            },
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "node", "image": "busybox"}],
                    }
                }
            },
        }
        return self.cluster.create("jobs", body, namespace, "batch")

    def mounted_token(self, pod: dict[str, Any]) -> str:
        """What the kubelet writes into the pod's ``kubeflow-trainer-token`` volume: a
        token for the audience and lifetime its projection names, bound to the pod."""
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == VOLUME_NAME]
        (projection,) = [
            s["serviceAccountToken"]
            for s in volume["projected"]["sources"]
            if "serviceAccountToken" in s
        ]
        return self.cluster.request_token(
            pod["metadata"]["namespace"],
            pod["spec"].get("serviceAccountName", "default"),
            [projection["audience"]],
            pod=pod["metadata"]["name"],
            expiration_seconds=projection["expirationSeconds"],
        )

    def mounted_ca(self, pod: dict[str, Any]) -> bytes:
        """The ``ca.crt`` the pod's projected volume takes from a ConfigMap."""
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == VOLUME_NAME]
        (source,) = [s["configMap"] for s in volume["projected"]["sources"] if "configMap" in s]
        namespace = pod["metadata"]["namespace"]

        def data() -> str | None:
            found = self.cluster.get("configmaps", namespace, source["name"])
            return None if found is None else found.get("data", {}).get("ca.crt")

        ca: str = wait_for(f"ConfigMap {namespace}/{source['name']}", data)
        return ca.encode()

    # -- programs ------------------------------------------------------------------------

    def _controller_token(self) -> str:
        return self.cluster.request_token(OPERATOR_NAMESPACE, SERVICE_NAME, [self.cluster.url])

    @contextmanager
    def controller(self, *, gate: bool) -> Iterator[TrainerController]:
        """The Trainer's controller manager, ``TrainJobStatus`` gate as asked."""
        probe, webhook, status = free_port(), free_port(), free_port()
        config = write_config(
            self._fresh_dir("controller"),
            controller_config(probe_port=probe, webhook_port=webhook, status_port=status),
        )
        argv = [
            str(self.assets.controller_manager),
            f"--config={config}",
            f"--feature-gates={GATE}={str(gate).lower()}",
        ]
        probe_ready = http_ready(probe)

        def ready() -> bool:
            self._mount_webhook_secret(process.cert_dir)
            return probe_ready()

        process = TrainerProcess(
            argv,
            token=self._controller_token(),
            kubeconfig=self.cluster.kubeconfig_path,
            ready=ready,
            name="trainer-controller-manager",
        )
        with process:
            if gate:
                wait_for("the Trainer's status server", tls_ready(status))
            yield TrainerController(process, status if gate else 0)

    def _mount_webhook_secret(self, folder: Path) -> None:
        """The kubelet's part: the Secret the controller's certificate management fills
        is mounted where the controller waits for it (its serving pair)."""
        if (folder / "tls.crt").exists():
            return
        secret = self.cluster.get("secrets", OPERATOR_NAMESPACE, WEBHOOK_SECRET) or {}
        data = secret.get("data") or {}
        if "tls.crt" in data and "tls.key" in data:
            for key in ("tls.key", "tls.crt", "ca.crt"):
                (folder / key).write_bytes(base64.b64decode(data[key]))

    @contextmanager
    def trainer_status_server(self, certs: ServingCerts) -> Iterator[PeerServer]:
        """Our runner of the Trainer's status server package, serving ``certs``."""
        port = free_port()
        config = write_config(self._fresh_dir("peer"), status_server_config(status_port=port))
        process = TrainerProcess(
            [str(self.assets.status_server), f"--config={config}"],
            token=self._controller_token(),
            kubeconfig=self.cluster.kubeconfig_path,
            ready=tls_ready(port),
            certs={"tls.crt": certs.cert_file.read_bytes(), "tls.key": certs.key_file.read_bytes()},
            name="trainer-status-server",
        )
        with process:
            yield PeerServer(process, port)

    @contextmanager
    def our_server(self, certs: ServingCerts, *flags: str) -> Iterator[OurServer]:
        """``trainjob-status-server serve`` as deployed (token checks on, the pod
        webhook served), its webhook registered with the API server for the pods of
        every namespace but its own, with ``failurePolicy: Fail`` so a pod our webhook
        did not see is never created."""
        port, probe, metrics = free_port(), free_port(), free_port()
        argv = [
            str(Path(sys.executable).parent / "trainjob-status-server"),
            "serve",
            f"--kubeconfig={self.cluster.kubeconfig_path}",
            f"--tls-cert-file={certs.cert_file}",
            f"--tls-key-file={certs.key_file}",
            "--host=127.0.0.1",
            f"--port={port}",
            f"--probe-port={probe}",
            f"--metrics-port={metrics}",
            "--min-write-interval=0",
            *flags,
        ]
        process = ChildProcess(argv, ready=http_ready(probe), name="trainjob-status-server")
        with process:
            self._register_webhook(port, certs)
            try:
                yield OurServer(process, port, metrics)
            finally:
                self.cluster.plane.request(
                    "DELETE",
                    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"
                    + OUR_WEBHOOK,
                )

    def _register_webhook(self, port: int, certs: ServingCerts) -> None:
        hook = {
            "name": "pods.trainjob-status.kubeflow.org",
            "clientConfig": {
                "url": f"https://127.0.0.1:{port}/mutate-pods",
                "caBundle": base64.b64encode(certs.ca.cert_pem).decode(),
            },
            "rules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE"],
                    "resources": ["pods"],
                }
            ],
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": [OPERATOR_NAMESPACE, "kube-system"],
                    }
                ]
            },
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
        }
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": OUR_WEBHOOK},
            "webhooks": [hook],
        }
        self.cluster.call(
            "POST", "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", body
        )

    def _fresh_dir(self, name: str) -> Path:
        folder = self.workdir / f"{name}-{secrets.token_hex(3)}"
        folder.mkdir(parents=True)
        return folder


def _version_of(found: dict[str, Any]) -> dict[str, Any]:
    return {"resourceVersion": found["metadata"]["resourceVersion"]}


@dataclass
class TrainerController:
    process: TrainerProcess
    # Its status server's port (0 with the gate off).
    status_port: int


@dataclass
class PeerServer:
    process: TrainerProcess
    port: int

    def url(self, namespace: str, name: str) -> str:
        return f"https://localhost:{self.port}{contract.status_path(namespace, name)}"


@dataclass
class OurServer:
    process: ChildProcess
    port: int
    metrics_port: int

    def metric(self, sample: str) -> float:
        """One sample's value on the metrics page (0 when it is absent)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            connection.request("GET", "/metrics")
            page = connection.getresponse().read().decode()
        finally:
            connection.close()
        for line in page.splitlines():
            if line.startswith(sample + " "):
                return float(line.split()[-1])
        return 0.0
