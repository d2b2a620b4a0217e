"""Kubeflow Trainer for real on the real control plane: its CRDs and JobSet's as their Go
modules ship them, its torch-distributed ClusterTrainingRuntime, its controller manager
with the ``TrainJobStatus`` gate off or on, its status server package run alone, and our
server run as deployed (``trainjob-status-server serve``) with its pod webhook
registered in the API server. No kubelet and no JobSet controller run: pods are created
by hand from the trainer step of the JobSet the Trainer built, as the Job controller
would, and their projected token is requested as the kubelet would request it.

The controller manager runs as deployed, not as the admin: as its service account
``kubeflow-system/kubeflow-trainer-controller-manager``, bound to the ClusterRole of the
Trainer's own manifests (``manifests/base/rbac``), through a kubeconfig holding a token
the control plane minted for that account (TokenRequest); our runner of its status
server package runs with the same credentials. Its validating and mutating webhooks
(``manifests/base/webhook``, named and selected as its kustomization patches them) are
registered while it runs, pointed at its webhook server on loopback. Two things differ
from a cluster, because a control plane alone has no cluster network: the webhooks name
a URL (``https://127.0.0.1:PORT/PATH``), not the Service ``kubeflow-trainer-controller-
manager`` (kube-apiserver would dial the Service's cluster IP, which nothing routes
here, and Endpoints may not name a loopback address); and so the Trainer's own
certificate management, whose certificate names only that Service's DNS name, is off:
the rig gives it a CA and a serving pair for both names (the Service's, for the pods
that post to its status server, and 127.0.0.1, for kube-apiserver's webhook calls) in
its certificate folder and in the Secret ``kubeflow-trainer-webhook-cert``, whose
``ca.crt`` the Trainer copies into each TrainJob's ``NAME-tls-config`` ConfigMap, as
certificates made elsewhere (the chart's ``certManagement.enable: false``) would be."""

from __future__ import annotations

import base64
import http.client
import json
import secrets
import socket
import ssl
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from trainjob_devcluster.harness.kubeconfig import write_kubeconfig
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
from trainjob_devcluster.harness.pki import CertificateAuthority
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import ServingCerts, free_port
from trainjob_devcluster.harness.workloads import controller_reference
from trainjob_devcluster.storage.patches import json_patch
from trainjob_status import contract
from trainjob_status_server.pods.injection import VOLUME_NAME

TRAINER_API = "/apis/trainer.kubeflow.org/v1alpha1"
JOBSET_API = "/apis/jobset.x-k8s.io/v1alpha2"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
RJOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
OUR_WEBHOOK = "trainjob-status"
ADMISSION_API = "/apis/admissionregistration.k8s.io/v1"
RBAC_API = "/apis/rbac.authorization.k8s.io/v1"
# What the Trainer's kustomization names the kinds of webhook configuration (the names
# its certificate management would look for too).
TRAINER_WEBHOOKS = {
    "MutatingWebhookConfiguration": ("mutatingwebhookconfigurations", "patch_mutating.yaml"),
    "ValidatingWebhookConfiguration": ("validatingwebhookconfigurations", "patch_validating.yaml"),
}
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
    # The Trainer's CA and its serving pair (the Service's name and 127.0.0.1).
    trainer_ca: CertificateAuthority = field(default_factory=CertificateAuthority)
    trainer_pair: tuple[bytes, bytes] = (b"", b"")

    # -- the cluster ---------------------------------------------------------------------

    def install(self) -> None:
        """The Trainer's CRDs and JobSet's replace any the control plane had; then its
        namespace, its service account and that account's ClusterRole and binding, the
        Secret holding its serving pair and CA, and the runtime."""
        for crd in self.assets.crds():
            self._put_crd(crd)
        self.cluster.ensure_namespace(OPERATOR_NAMESPACE)
        service = f"{SERVICE_NAME}.{OPERATOR_NAMESPACE}.svc"
        self.trainer_pair = self.trainer_ca.issue_server_cert([service], ["127.0.0.1"])
        cert, key = self.trainer_pair
        secret: dict[str, Any] = {
            "metadata": {"name": WEBHOOK_SECRET},
            "type": "kubernetes.io/tls",
            "data": {
                name: base64.b64encode(value).decode()
                for name, value in (
                    ("tls.crt", cert),
                    ("tls.key", key),
                    ("ca.crt", self.trainer_ca.cert_pem),
                )
            },
        }
        account: dict[str, Any] = {"metadata": {"name": SERVICE_NAME}}
        for plural, body in (("secrets", secret), ("serviceaccounts", account)):
            if self.cluster.get(plural, OPERATOR_NAMESPACE, body["metadata"]["name"]) is None:
                self.cluster.create(plural, body, OPERATOR_NAMESPACE)
        self._install_rbac()
        runtime = self.assets.runtime()
        path = f"{TRAINER_API}/clustertrainingruntimes"
        code, _ = self.cluster.plane.request("GET", f"{path}/{runtime['metadata']['name']}")
        if code == 404:
            self.cluster.call("POST", path, runtime)

    def _install_rbac(self) -> None:
        """The Trainer's ClusterRole and ClusterRoleBinding as its manifests ship them,
        the binding's service account in the namespace its kustomization installs to."""
        (role,) = self.assets.manifests("manifests/role.yaml")
        (binding,) = self.assets.manifests("manifests/role_binding.yaml")
        binding["subjects"] = [
            {**subject, "namespace": OPERATOR_NAMESPACE} for subject in binding["subjects"]
        ]
        for plural, body in (("clusterroles", role), ("clusterrolebindings", binding)):
            path = f"{RBAC_API}/{plural}"
            code, _ = self.cluster.plane.request("GET", f"{path}/{body['metadata']['name']}")
            if code == 404:
                self.cluster.call("POST", path, body)

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

    def _controller_kubeconfig(self) -> Path:
        """A kubeconfig holding a token the control plane minted for the Trainer's
        service account (as its pod would mount), not the admin's."""
        token = self.cluster.request_token(OPERATOR_NAMESPACE, SERVICE_NAME, [self.cluster.url])
        return write_kubeconfig(
            self._fresh_dir("kubeconfig") / "kubeconfig",
            self.cluster.url,
            self.cluster.ca_path.read_bytes(),
            token,
        )

    def _controller_token(self) -> str:
        return self.cluster.request_token(OPERATOR_NAMESPACE, SERVICE_NAME, [self.cluster.url])

    def _serving_pair(self) -> dict[str, bytes]:
        cert, key = self.trainer_pair
        return {"tls.crt": cert, "tls.key": key, "ca.crt": self.trainer_ca.cert_pem}

    @contextmanager
    def controller(
        self, *, gate: bool, extra_args: Sequence[str] = ()
    ) -> Iterator[TrainerController]:
        """The Trainer's controller manager, ``TrainJobStatus`` gate as asked (and
        ``extra_args``, such as a log level), its webhooks registered while it runs."""
        probe, webhook, status = free_port(), free_port(), free_port()
        config = write_config(
            self._fresh_dir("controller"),
            controller_config(probe_port=probe, webhook_port=webhook, status_port=status),
        )
        argv = [
            str(self.assets.controller_manager),
            f"--config={config}",
            f"--feature-gates={GATE}={str(gate).lower()}",
            *extra_args,
        ]
        process = TrainerProcess(
            argv,
            token=self._controller_token(),
            kubeconfig=self._controller_kubeconfig(),
            # Ready once its webhook server has started (its readiness check says so).
            ready=http_ready(probe),
            certs=self._serving_pair(),
            name="trainer-controller-manager",
        )
        with process:
            try:
                self._register_trainer_webhooks(webhook)
                if gate:
                    wait_for("the Trainer's status server", tls_ready(status))
                yield TrainerController(process, status if gate else 0)
            finally:
                # Without its server, a webhook that fails closed would refuse every
                # TrainJob written after (as in a cluster whose Trainer is down).
                self._unregister_trainer_webhooks()

    def trainer_webhooks(self, port: int) -> list[dict[str, Any]]:
        """The Trainer's webhook configurations as its kustomization builds them, each
        webhook pointed at its server on 127.0.0.1:``port`` with the rig's CA."""
        configs = []
        for config in self.assets.manifests("webhooks.yaml"):
            _, patch = TRAINER_WEBHOOKS[config["kind"]]
            config = json_patch(config, self.assets.manifests(f"manifests/{patch}")[0])
            for hook in config["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{path}",
                    "caBundle": base64.b64encode(self.trainer_ca.cert_pem).decode(),
                }
            configs.append(config)
        return configs

    def _register_trainer_webhooks(self, port: int) -> None:
        """Registered, then waited for until kube-apiserver calls both (it takes them
        from a watch of its own): a TrainJob created as a dry run gets the defaulter's
        time on its runtime patch, and one naming no runtime is refused by the
        validator."""
        # A controller stopped by hand inside another's block left its own behind.
        self._unregister_trainer_webhooks()
        for config in self.trainer_webhooks(port):
            plural, _ = TRAINER_WEBHOOKS[config["kind"]]
            self.cluster.call("POST", f"{ADMISSION_API}/{plural}", config)
        self.cluster.ensure_namespace("default")
        path = f"{TRAINER_API}/namespaces/default/trainjobs?dryRun=All"

        def probe(runtime: str) -> tuple[int, Any]:
            body = {
                "apiVersion": "trainer.kubeflow.org/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": "webhook-probe"},
                "spec": {
                    "runtimeRef": {"name": runtime},
                    "runtimePatches": [{"manager": "example.com/webhook-probe"}],
                },
            }
            return self.cluster.plane.request("POST", path, body)

        def called() -> bool:
            code, defaulted = probe("torch-distributed")
            patches = defaulted.get("spec", {}).get("runtimePatches") or [{}]
            return code == 201 and "time" in patches[0] and probe("no-such-runtime")[0] == 403

        wait_for("kube-apiserver calling the Trainer's webhooks", called)

    def _unregister_trainer_webhooks(self) -> None:
        for config in self.assets.manifests("webhooks.yaml"):
            plural, patch = TRAINER_WEBHOOKS[config["kind"]]
            named = json_patch(config, self.assets.manifests(f"manifests/{patch}")[0])
            self.cluster.plane.request(
                "DELETE", f"{ADMISSION_API}/{plural}/{named['metadata']['name']}"
            )

    @contextmanager
    def trainer_status_server(self, certs: ServingCerts) -> Iterator[PeerServer]:
        """Our runner of the Trainer's status server package, serving ``certs``."""
        port = free_port()
        config = write_config(self._fresh_dir("peer"), status_server_config(status_port=port))
        process = TrainerProcess(
            [str(self.assets.status_server), f"--config={config}"],
            token=self._controller_token(),
            kubeconfig=self._controller_kubeconfig(),
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
            "--webhook-port=0",
            "--min-write-interval=0",
            *flags,
        ]
        process = ChildProcess(argv, ready=http_ready(probe), name="trainjob-status-server")
        with process:
            self._register_webhook(port, certs)
            try:
                server = OurServer(process, port, metrics)
                self._until_our_webhook_is_called(server)
                yield server
            finally:
                self.cluster.plane.request(
                    "DELETE", f"{ADMISSION_API}/mutatingwebhookconfigurations/{OUR_WEBHOOK}"
                )

    def _until_our_webhook_is_called(self, server: OurServer) -> None:
        """kube-apiserver takes a new webhook configuration from a watch of its own, so
        a pod created just after the configuration may be admitted without the webhook:
        waits until it calls ours, with pods created as a dry run (admitted, not
        stored) and not selected, so the injection counts of the tests' pods are
        unchanged."""
        sample = 'trainjob_status_injections_total{result="not_selected"}'
        before = server.metric(sample)
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "webhook-probe"},
            "spec": {"containers": [{"name": "probe", "image": "busybox"}]},
        }
        # Its namespace needs the default ServiceAccount the pod is admitted with.
        self.cluster.ensure_namespace("default")
        path = "/api/v1/namespaces/default/pods?dryRun=All"
        wait_for(
            "kube-apiserver calling our webhook",
            lambda: self.cluster.call("POST", path, probe) and server.metric(sample) > before,
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
        self.cluster.call("POST", f"{ADMISSION_API}/mutatingwebhookconfigurations", body)

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
