"""What the Trainer, JobSet and Job controllers make for a TrainJob, made by hand on any
API server handle: the JobSet owned by the TrainJob, a Job owned by the JobSet, a pod
owned by the Job. Both the development cluster and the real control plane use it, so a
test's pods have the same owner chain on either."""

from __future__ import annotations

from typing import Any, Protocol

from trainjob_status import contract

Obj = dict[str, Any]

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_STEP_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
# A Job template as JobSet's own CRD requires one (the real CRD's schema), used for the
# JobSet's step and the Job made of it.
_JOB_SPEC: Obj = {
    "spec": {
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "node", "image": "busybox"}],
            }
        }
    }
}


class Handle(Protocol):
    """The calls of an API server handle this module needs."""

    def get(self, plural: str, namespace: str, name: str, group: str = "") -> Obj | None: ...

    def create(self, plural: str, obj: Obj, namespace: str = "", group: str = "") -> Obj: ...


def controller_reference(owner: Obj) -> Obj:
    """The ownerReferences entry a controller puts on what it makes of ``owner``."""
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_body(
    name: str, service_account: str, labels: dict[str, str] | None, owner: Obj | None
) -> Obj:
    """A pod of one container; ``owner`` (an object as stored) becomes its controller."""
    meta: Obj = {"name": name, "labels": labels or {}}
    if owner is not None:
        meta["ownerReferences"] = [controller_reference(owner)]
    return {
        "metadata": meta,
        "spec": {
            "serviceAccountName": service_account,
            "containers": [{"name": "trainer", "image": "busybox"}],
        },
    }


def trainjob_job(
    api: Handle, namespace: str, trainjob: str, replicated_job: str = "node", index: int = 0
) -> Obj:
    """The Job ``<trainjob>-<replicated_job>-<index>`` of TrainJob ``trainjob`` (which must
    exist), owned by the JobSet ``trainjob``, itself owned by the TrainJob; both made if
    missing."""
    found = api.get(contract.RESOURCE, namespace, trainjob, contract.GROUP)
    if found is None:
        raise KeyError(f"trainjob {namespace}/{trainjob} not found")
    labels = {contract.JOBSET_NAME_LABEL: trainjob}
    jobset = api.get("jobsets", namespace, trainjob, JOBSET_GROUP)
    if jobset is None:
        body: Obj = {
            "metadata": {"name": trainjob, "ownerReferences": [controller_reference(found)]},
            "spec": {"replicatedJobs": [{"name": replicated_job, "template": _JOB_SPEC}]},
        }
        jobset = api.create("jobsets", body, namespace, JOBSET_GROUP)
    job_name = f"{trainjob}-{replicated_job}-{index}"
    job = api.get("jobs", namespace, job_name, "batch")
    if job is None:
        job_body: Obj = {
            "metadata": {
                "name": job_name,
                "labels": {**labels, JOBSET_STEP_LABEL: replicated_job},
                "ownerReferences": [controller_reference(jobset)],
            },
            "spec": _JOB_SPEC["spec"],
        }
        job = api.create("jobs", job_body, namespace, "batch")
    return job


class TrainJobWorkloads:
    """What tests make on an API server, for a handle that has ``get``, ``create`` and
    ``ensure_namespace``: TrainJobs, pods, and the JobSet and Job between them."""

    def get(self, plural: str, namespace: str, name: str, group: str = "") -> Obj | None:
        raise NotImplementedError

    def create(self, plural: str, obj: Obj, namespace: str = "", group: str = "") -> Obj:
        raise NotImplementedError

    def ensure_namespace(self, name: str) -> Obj:
        raise NotImplementedError

    def create_trainjob(self, namespace: str, name: str, **spec: Any) -> Obj:
        """TrainJob ``name`` on the torch-distributed runtime, with ``spec`` added (its
        ``runtimeRef`` merged into the default one). The CRD's defaults are spelled out:
        the development cluster applies none, and the exporter reads them."""
        self.ensure_namespace(namespace)
        runtime_ref = {
            "apiGroup": contract.GROUP,
            "kind": "ClusterTrainingRuntime",
            "name": "torch-distributed",
            **spec.pop("runtimeRef", {}),
        }
        body = {
            "apiVersion": f"{contract.GROUP}/{contract.VERSION}",
            "kind": contract.KIND,
            "metadata": {"name": name},
            "spec": {
                "runtimeRef": runtime_ref,
                "managedBy": "trainer.kubeflow.org/trainjob-controller",
                "suspend": False,
                **spec,
            },
        }
        return self.create(contract.RESOURCE, body, namespace, contract.GROUP)

    def create_pod(
        self,
        namespace: str,
        name: str,
        *,
        service_account: str = "default",
        labels: dict[str, str] | None = None,
        owner: Obj | None = None,
    ) -> Obj:
        """A pod (and its ServiceAccount where missing); ``owner`` (an object as stored)
        becomes its controller reference."""
        self.ensure_namespace(namespace)
        if self.get("serviceaccounts", namespace, service_account) is None:
            self.create("serviceaccounts", {"metadata": {"name": service_account}}, namespace)
        return self.create("pods", pod_body(name, service_account, labels, owner), namespace)

    def create_trainjob_pod(
        self,
        namespace: str,
        trainjob: str,
        name: str,
        *,
        service_account: str = "default",
        replicated_job: str = "node",
        index: int = 0,
    ) -> Obj:
        """A pod of TrainJob ``trainjob`` (which must exist) made as the Trainer, JobSet
        and Job controllers make one: owned by ``create_trainjob_job``'s Job and labelled
        with its JobSet's name."""
        job = self.create_trainjob_job(namespace, trainjob, replicated_job, index)
        labels = {contract.JOBSET_NAME_LABEL: trainjob}
        return self.create_pod(
            namespace, name, service_account=service_account, labels=labels, owner=job
        )

    def create_trainjob_job(
        self, namespace: str, trainjob: str, replicated_job: str = "node", index: int = 0
    ) -> Obj:
        """The Job ``<trainjob>-<replicated_job>-<index>`` of TrainJob ``trainjob`` (which
        must exist), owned by the JobSet ``trainjob``, itself owned by the TrainJob; both
        made if missing."""
        return trainjob_job(self, namespace, trainjob, replicated_job, index)

    def token_request_spec(
        self, namespace: str, audiences: list[str], pod: str | None, expiration_seconds: int
    ) -> Obj:
        """A TokenRequest's spec as kubelet writes it for a projected volume, bound to
        ``pod`` (which must exist) when one is named."""
        spec: Obj = {"audiences": audiences, "expirationSeconds": expiration_seconds}
        if pod is not None:
            found = self.get("pods", namespace, pod)
            if found is None:
                raise KeyError(f"pod {namespace}/{pod} not found")
            spec["boundObjectRef"] = {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": pod,
                "uid": found["metadata"]["uid"],
            }
        return spec
