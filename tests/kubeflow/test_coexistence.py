"""Our server beside Kubeflow Trainer's real controller manager, on a real control plane:
with its ``TrainJobStatus`` gate off our webhook injects and our server stores; with it
on the Trainer injects its own URL and audience into the JobSets it builds, our webhook
leaves those pods alone (or takes them over with ``--override-existing``), the token the
Trainer's volume mounts passes our checks, and both servers write ``trainerStatus`` as
the same field manager without a conflict."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trainjob_devcluster.harness.kubeflow_trainer import OPERATOR_NAMESPACE, SERVICE_NAME
from trainjob_devcluster.harness.testing import ServingCerts
from trainjob_status.contract import CA_CERT_ENV, TOKEN_ENV, URL_ENV, audience, status_path
from trainjob_status_server.pods.injection import MOUNT_PATH, VOLUME_NAME

from .rig import FIELD_MANAGER, Kubeflow, env_of, post, status_body, wait_for

OURS = "https://trainjob-status.trainjob-status.svc:10443"
START = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)

# Go programs and a control plane starting on a shared 2-core machine.
pytestmark = pytest.mark.timeout(600)


def stamp(second: int) -> str:
    """Distinct, increasing update times: both servers keep only the newest."""
    return (START + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%SZ")


def trainer_url(port: int, namespace: str, name: str) -> str:
    host = f"{SERVICE_NAME}.{OPERATOR_NAMESPACE}.svc"
    return f"https://{host}:{port}{status_path(namespace, name)}"


def trainer_step_env(jobset: dict[str, Any]) -> dict[str, str]:
    """The trainer step's container environment in the JobSet's template."""
    for rjob in jobset["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]
        if (
            rjob["template"]
            .get("metadata", {})
            .get("labels", {})
            .get("trainer.kubeflow.org/trainjob-ancestor-step")
            == "trainer"
        ):
            return env_of(pod)
    raise AssertionError("no trainer step in the JobSet")


def progress(kubeflow: Kubeflow, namespace: str, name: str) -> int | None:
    status = kubeflow.trainjob(namespace, name).get("status", {}).get("trainerStatus") or {}
    found = status.get("progressPercentage")
    return found if isinstance(found, int) else None


def shows(kubeflow: Kubeflow, namespace: str, name: str, percent: int) -> None:
    wait_for(
        f"{namespace}/{name} at {percent}%",
        lambda: progress(kubeflow, namespace, name) == percent,
    )


def test_gate_off_our_webhook_injects_and_our_server_stores(
    kubeflow: Kubeflow, certs: ServingCerts
) -> None:
    ns, name = "gate-off", "job1"
    with kubeflow.controller(gate=False), kubeflow.our_server(certs) as ours:
        kubeflow.create_trainjob(ns, name)
        jobset = kubeflow.jobset(ns, name)
        assert not {URL_ENV, CA_CERT_ENV, TOKEN_ENV} & set(trainer_step_env(jobset))
        pod = kubeflow.trainer_pod(jobset)
        env = env_of(pod)
        assert env[URL_ENV] == OURS + status_path(ns, name)
        assert env[TOKEN_ENV] == f"{MOUNT_PATH}/token"
        token = kubeflow.mounted_token(pod)
        answer = post(
            ours.port,
            env[URL_ENV],
            token=token,
            ca_pem=certs.ca.cert_pem,
            hostname="localhost",
            body=status_body(40, stamp(1)),
        )
        assert answer.code == 200, answer
        shows(kubeflow, ns, name, 40)
        assert ours.metric('trainjob_status_injections_total{result="injected"}') == 1


def test_gate_on_the_trainer_injects_and_our_webhook_leaves_its_pods_alone(
    kubeflow: Kubeflow, certs: ServingCerts
) -> None:
    ns, name = "gate-on", "job1"
    with kubeflow.controller(gate=True) as trainer, kubeflow.our_server(certs) as ours:
        kubeflow.create_trainjob(ns, name)
        jobset = kubeflow.jobset(ns, name)
        built = trainer_step_env(jobset)
        assert built == {
            URL_ENV: trainer_url(trainer.status_port, ns, name),
            CA_CERT_ENV: f"{MOUNT_PATH}/ca.crt",
            TOKEN_ENV: f"{MOUNT_PATH}/token",
        }
        pod = kubeflow.trainer_pod(jobset)
        assert env_of(pod) == built
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == VOLUME_NAME]
        (projection,) = [
            s["serviceAccountToken"]
            for s in volume["projected"]["sources"]
            if "serviceAccountToken" in s
        ]
        mounts = pod["spec"]["containers"][0]["volumeMounts"]
        assert {"name": VOLUME_NAME, "mountPath": MOUNT_PATH, "readOnly": True} in [
            {k: m.get(k) for k in ("name", "mountPath", "readOnly")} for m in mounts
        ]
        # The same audience as ours, so one token serves either server.
        assert projection["audience"] == audience(ns, name)
        assert projection["expirationSeconds"] == 3600
        assert ours.metric('trainjob_status_injections_total{result="present"}') == 1

        token = kubeflow.mounted_token(pod)
        theirs = post(
            trainer.status_port,
            built[URL_ENV],
            token=token,
            ca_pem=kubeflow.mounted_ca(pod),
            body=status_body(10, stamp(1)),
        )
        assert theirs.code == 200, theirs
        shows(kubeflow, ns, name, 10)
        # The token the Trainer's volume mounts passes our checks too: its audience,
        # its issuer's signature, and its binding to a live pod of this TrainJob.
        mine = post(
            ours.port,
            OURS + status_path(ns, name),
            token=token,
            ca_pem=certs.ca.cert_pem,
            hostname="localhost",
            body=status_body(20, stamp(2)),
        )
        assert mine.code == 200, mine
        shows(kubeflow, ns, name, 20)


def test_override_existing_takes_the_trainers_pods_over(
    kubeflow: Kubeflow, certs: ServingCerts
) -> None:
    ns, name = "override", "job1"
    with (
        kubeflow.controller(gate=True) as trainer,
        kubeflow.our_server(certs, "--override-existing") as ours,
    ):
        kubeflow.create_trainjob(ns, name)
        jobset = kubeflow.jobset(ns, name)
        assert trainer_step_env(jobset)[URL_ENV] == trainer_url(trainer.status_port, ns, name)
        pod = kubeflow.trainer_pod(jobset)
        env = env_of(pod)
        # Our server's log says what it decided (the pod's admission, the post's check),
        # should either go otherwise.
        assert env[URL_ENV] == OURS + status_path(ns, name), ours.process.log()[-4000:]
        assert ours.metric('trainjob_status_injections_total{result="overridden"}') == 1
        volumes = [v for v in pod["spec"]["volumes"] if v["name"] == VOLUME_NAME]
        assert len(volumes) == 1
        answer = post(
            ours.port,
            env[URL_ENV],
            token=kubeflow.mounted_token(pod),
            ca_pem=certs.ca.cert_pem,
            hostname="localhost",
            body=status_body(55, stamp(1)),
        )
        assert answer.code == 200, (answer, ours.process.log()[-4000:])
        shows(kubeflow, ns, name, 55)


def test_both_servers_write_trainer_status_as_one_field_manager(
    kubeflow: Kubeflow, certs: ServingCerts
) -> None:
    ns, name = "both", "job1"
    with kubeflow.controller(gate=True) as trainer, kubeflow.our_server(certs) as ours:
        kubeflow.create_trainjob(ns, name)
        pod = kubeflow.trainer_pod(kubeflow.jobset(ns, name))
        token = kubeflow.mounted_token(pod)
        trainer_ca = kubeflow.mounted_ca(pod)
        for second in range(1, 7):
            percent = second * 10
            if second % 2:
                answer = post(
                    trainer.status_port,
                    env_of(pod)[URL_ENV],
                    token=token,
                    ca_pem=trainer_ca,
                    body=status_body(percent, stamp(second)),
                )
            else:
                answer = post(
                    ours.port,
                    OURS + status_path(ns, name),
                    token=token,
                    ca_pem=certs.ca.cert_pem,
                    hostname="localhost",
                    body=status_body(percent, stamp(second)),
                )
            assert answer.code == 200, (second, answer)
            shows(kubeflow, ns, name, percent)
        managers = [
            entry
            for entry in kubeflow.trainjob(ns, name)["metadata"]["managedFields"]
            if "f:trainerStatus" in entry.get("fieldsV1", {}).get("f:status", {})
        ]
        assert [(m["manager"], m["operation"], m.get("subresource")) for m in managers] == [
            (FIELD_MANAGER, "Apply", "status")
        ]
        assert ours.metric('trainjob_status_api_writes_total{result="conflict"}') == 0
        assert ours.metric('trainjob_status_api_writes_total{result="ok"}') == 3
