"""Pods the Trainer's own ``TrainJobStatus`` plugin already injected (its feature gate
on): left alone by default, redirected to this server with ``--override-existing``;
either way counted per pod in ``trainjob_status_injections_total`` and logged once per
TrainJob. The pods are shaped as the Trainer's controller builds them: the three
variables pointing at its controller's Service, its projected volume (the TrainJob's
token audience and the per-TrainJob ``<name>-tls-config`` ConfigMap) mounted read-only,
and the defaults the API server adds."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from trainjob_devcluster import DevCluster
from trainjob_status.contract import CA_CERT_ENV, TOKEN_ENV, URL_ENV
from trainjob_status.contract import audience as audience_for
from trainjob_status_server.http.webhook import InjectorSettings
from trainjob_status_server.pods import injection
from trainjob_status_server.pods.injection import FirstSighting, Target

from .test_webhook import make_rig
from .test_webhook_support import NS, TJ, StandIn, apply_patch, decoded_patch, jobset, pod, review

TRAINER = "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443"
MOUNT = "/var/run/secrets/kubeflow/trainer"
OTHER = "tj2"


@pytest_asyncio.fixture
async def standin(tmp_path: Path) -> AsyncIterator[StandIn]:
    server = await StandIn(tmp_path).start()
    server.put("jobsets", jobset())
    yield server
    await server.stop()


def trainer_injected(trainjob: str = TJ, name: str = "tj-node-0-0") -> dict[str, Any]:
    """A trainer pod whose JobSet template the Trainer's plugin filled in."""
    env = [
        {
            "name": "KUBEFLOW_TRAINER_SERVER_URL",
            "value": f"{TRAINER}/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NS}"
            f"/trainjobs/{trainjob}/status",
        },
        {"name": CA_CERT_ENV, "value": f"{MOUNT}/ca.crt"},
        {"name": TOKEN_ENV, "value": f"{MOUNT}/token"},
    ]
    volume = {
        "name": "kubeflow-trainer-token",
        "projected": {
            "sources": [
                {
                    "serviceAccountToken": {
                        "audience": audience_for(NS, trainjob),
                        "expirationSeconds": 3600,
                        "path": "token",
                    }
                },
                {
                    "configMap": {
                        "name": f"{trainjob}-tls-config",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
            ],
            "defaultMode": 420,  # the API server's default
        },
    }
    container = {
        "name": "node",
        "image": "pytorch/pytorch",
        "env": env,
        "volumeMounts": [
            {"name": "kubeflow-trainer-token", "mountPath": MOUNT, "readOnly": True},
        ],
    }
    return pod(name, trainjob=trainjob, containers=[container], volumes=[volume])


def foreign_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    messages = (
        "trainjob pods report elsewhere; left alone",
        "trainjob pods redirected to this server",
    )
    return [
        {
            "msg": r.getMessage(),
            "level": r.levelname,
            "trainjob": getattr(r, "trainjob", None),
            "result": getattr(r, "result", None),
            "elsewhere": getattr(r, "elsewhere", None),
        }
        for r in caplog.records
        if r.getMessage() in messages
    ]


async def test_left_alone_by_default_counted_per_pod_logged_once_per_trainjob(
    devcluster: DevCluster, standin: StandIn, caplog: pytest.LogCaptureFixture
) -> None:
    standin.put("jobsets", jobset(OTHER))
    devcluster.create_trainjob(NS, OTHER)
    async for rig in make_rig(devcluster, standin, InjectorSettings()):
        await rig.put_jobset(jobset(OTHER))
        for i in range(3):
            answer, outcome = await rig.admit(review(trainer_injected(name=f"tj-node-0-{i}")))
            assert outcome == injection.PRESENT
            assert "patch" not in answer["response"]
        _, outcome = await rig.admit(review(trainer_injected(OTHER, "tj2-node-0-0")))
        assert outcome == injection.PRESENT
    assert foreign_lines(caplog) == [
        {
            "msg": "trainjob pods report elsewhere; left alone",
            "level": "WARNING",
            "trainjob": trainjob,
            "result": "present",
            "elsewhere": TRAINER,
        }
        for trainjob in (TJ, OTHER)
    ]


async def test_override_existing_redirects_the_trainers_pods_here(
    devcluster: DevCluster, standin: StandIn, caplog: pytest.LogCaptureFixture
) -> None:
    original = trainer_injected()
    async for rig in make_rig(devcluster, standin, InjectorSettings(override_existing=True)):
        for uid in ("a", "b"):
            answer, outcome = await rig.admit(review(original, uid=uid))
            assert outcome == injection.OVERRIDDEN
        result = apply_patch(original, decoded_patch(answer) or [])
        # Re-invoked on its own result, the webhook finds its own injection.
        again, outcome = await rig.admit(review(result, uid="c"))
        assert outcome == injection.UNCHANGED
        assert "patch" not in again["response"]
    # Exactly what a pod the Trainer never touched gets from us (the API server's
    # default on the volume aside): our URL, our CA ConfigMap, the same token audience.
    bare = pod()
    ours = apply_patch(bare, injection.plan(bare, NS, TJ, Target()).patch)
    expected = copy.deepcopy(ours)
    expected["spec"]["volumes"][0]["projected"]["defaultMode"] = 420
    replaced = result["spec"]["volumes"][0]
    assert replaced == ours["spec"]["volumes"][0]
    result["spec"]["volumes"][0]["projected"]["defaultMode"] = 420
    assert result == expected
    (container,) = result["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env[URL_ENV].startswith(
        "https://trainjob-status.trainjob-status.svc:10443/apis/trainer.kubeflow.org/"
    )
    assert foreign_lines(caplog) == [
        {
            "msg": "trainjob pods redirected to this server",
            "level": "INFO",
            "trainjob": TJ,
            "result": "overridden",
            "elsewhere": TRAINER,
        }
    ]


def test_first_sighting_is_bounded() -> None:
    seen = FirstSighting(size=2)
    assert [seen.first(k) for k in ("a", "a", "b", "a", "c")] == [True, False, True, False, True]
    assert len(seen) == 2
    # "b" was the least recently seen: forgotten, so new again; "a" is still known.
    assert seen.first("a") is False
    assert seen.first("b") is True
    assert len(seen) == 2


@pytest.mark.parametrize(
    ("env", "where"),
    [
        ([{"name": URL_ENV, "value": f"{TRAINER}/x"}], TRAINER),
        (
            [{"name": URL_ENV, "value": "http://10.0.0.1/x"}],
            "http://10.0.0.1",
        ),
        ([{"name": URL_ENV, "valueFrom": {"secretKeyRef": {}}}], ""),
        ([{"name": URL_ENV, "value": "not a url"}], ""),
        ([{"name": TOKEN_ENV, "value": "/t"}], ""),
        ([{"name": URL_ENV, "value": Target().url(NS, TJ)}], ""),
    ],
    ids=["trainer", "elsewhere", "from-secret", "no-host", "no-url", "ours"],
)
def test_elsewhere_names_only_a_foreign_origin(env: list[dict[str, Any]], where: str) -> None:
    found = pod(containers=[{"name": "node", "image": "i", "env": env}])
    assert injection.elsewhere(found, Target()) == where
