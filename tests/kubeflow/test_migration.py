"""docs/kubeflow.md, "Moving from the Trainer's server to ours, without losing updates",
run step by step against the Trainer's real controller: every post any pod makes on the
way is answered 200 by the server its URL names, and every TrainJob ends holding its
last update."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest

from trainjob_devcluster.harness.kubeflow_trainer import SERVICE_NAME
from trainjob_devcluster.harness.testing import ServingCerts
from trainjob_status.contract import URL_ENV

from .rig import (
    JOBSET_API,
    JOBSET_LABEL,
    TRAINER_API,
    Kubeflow,
    OurServer,
    TrainerController,
    env_of,
    post,
    status_body,
)
from .test_coexistence import progress, shows, stamp

# Go programs and a control plane starting on a shared 2-core machine.
pytestmark = pytest.mark.timeout(600)


@dataclass
class Servers:
    """The servers running at a given moment; a pod's post goes where its URL points."""

    kubeflow: Kubeflow
    certs: ServingCerts
    trainer: TrainerController | None = None
    ours: OurServer | None = None
    clock: int = 0
    sent: dict[str, int] = field(default_factory=dict)

    def report(self, pod: dict[str, Any], percent: int) -> None:
        url = env_of(pod)[URL_ENV]
        self.clock += 1
        body = status_body(percent, stamp(self.clock))
        token = self.kubeflow.mounted_token(pod)
        if (urlsplit(url).hostname or "").startswith(SERVICE_NAME):
            assert self.trainer is not None, f"{url}: no Trainer running"
            assert self.trainer.status_port, f"{url}: the Trainer's gate is off"
            ca = self.kubeflow.mounted_ca(pod)
            answer = post(self.trainer.status_port, url, token=token, ca_pem=ca, body=body)
        else:
            assert self.ours is not None, f"{url}: not running"
            answer = post(
                self.ours.port,
                url,
                token=token,
                ca_pem=self.certs.ca.cert_pem,
                hostname="localhost",
                body=body,
            )
        assert answer.code == 200, (pod["metadata"]["name"], url, answer)
        trainjob = pod["metadata"]["labels"][JOBSET_LABEL]
        self.sent[trainjob] = percent
        shows(self.kubeflow, pod["metadata"]["namespace"], trainjob, percent)


def pods_pointing_at_the_trainer(kubeflow: Kubeflow) -> list[str]:
    """Step 2's check: the pods whose URL names the Trainer's Service."""
    pods = kubeflow.cluster.call("GET", f"/api/v1/pods?labelSelector={JOBSET_LABEL}")["items"]
    return [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in pods
        if SERVICE_NAME in env_of(p).get(URL_ENV, "")
    ]


def jobsets_built_with_the_gate_on(kubeflow: Kubeflow) -> int:
    """Step 3's check: how often the Trainer's Service appears in the JobSets."""
    jobsets = kubeflow.cluster.call("GET", f"{JOBSET_API}/jobsets")
    return json.dumps(jobsets).count(SERVICE_NAME)


def test_moving_to_ours_loses_no_update(kubeflow: Kubeflow, certs: ServingCerts) -> None:
    ns = "moving"
    servers = Servers(kubeflow, certs)
    with kubeflow.controller(gate=True) as trainer:
        servers.trainer = trainer
        kubeflow.create_trainjob(ns, "a")
        a0 = kubeflow.trainer_pod(kubeflow.jobset(ns, "a"))
        servers.report(a0, 10)

        # 1. Ours, with --override-existing: new trainer pods report here; running
        # ones still report to the Trainer's server, which is still on.
        with kubeflow.our_server(certs, "--override-existing") as ours:
            servers.ours = ours
            kubeflow.create_trainjob(ns, "b")
            b0 = kubeflow.trainer_pod(kubeflow.jobset(ns, "b"))
            assert ours.metric('trainjob_status_injections_total{result="overridden"}') == 1
            servers.report(b0, 10)
            servers.report(a0, 50)

            # 2. Until no pod points at the Trainer's server: a's pod ends.
            assert pods_pointing_at_the_trainer(kubeflow) == [f"{ns}/{a0['metadata']['name']}"]
            servers.report(a0, 100)
            kubeflow.cluster.delete("pods", ns, a0["metadata"]["name"])
            assert pods_pointing_at_the_trainer(kubeflow) == []
            trainer.process.close()
            servers.trainer = None
            with kubeflow.controller(gate=False) as without_gate:
                servers.trainer = without_gate
                servers.report(b0, 40)
                # A restarted pod of b, from a JobSet built while the gate was on.
                b1 = kubeflow.trainer_pod(kubeflow.jobset(ns, "b"), index=1)
                servers.report(b1, 60)
                kubeflow.create_trainjob(ns, "c")
                c0 = kubeflow.trainer_pod(kubeflow.jobset(ns, "c"))
                servers.report(c0, 10)
                assert ours.metric('trainjob_status_injections_total{result="injected"}') == 1

                # 3. a and b end: each TrainJob holds its last update, and is
                # deleted with its JobSet (the garbage collector's part, done by hand
                # here). Until then their JobSets keep the Trainer's variables.
                servers.report(b1, 100)
                assert jobsets_built_with_the_gate_on(kubeflow) == 2
                for name in ("a", "b"):
                    assert progress(kubeflow, ns, name) == servers.sent[name] == 100
                    kubeflow.cluster.call(
                        "DELETE", f"{TRAINER_API}/namespaces/{ns}/trainjobs/{name}"
                    )
                    kubeflow.cluster.call("DELETE", f"{JOBSET_API}/namespaces/{ns}/jobsets/{name}")
                assert jobsets_built_with_the_gate_on(kubeflow) == 0
        servers.ours = None
        with kubeflow.our_server(certs) as ours:
            servers.ours = ours
            c1 = kubeflow.trainer_pod(kubeflow.jobset(ns, "c"), index=1)
            servers.report(c1, 100)
            assert ours.metric('trainjob_status_injections_total{result="injected"}') == 1

    assert servers.sent == {"a": 100, "b": 100, "c": 100}
    assert progress(kubeflow, ns, "c") == 100
