"""Generated bodies and headers thrown at the endpoint: never a 500, never a hang, and a
write exactly when the CRD accepts the status, as the real API server judges it (these
tests run on the control plane only, and skip without it)."""

from __future__ import annotations

import copy
import datetime as dt
import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import BackgroundStack, ServingCerts, status_path

from .conftest import GROUP, NS

PAST = ["2026-12-02T18:33:25Z", "2026-12-02T18:33:25.123456+00:00", "2020-01-01T00:00:00Z"]


class Harness(BackgroundStack):
    """The real control plane (holding TrainJob team-a/tj) and the server on a loop of
    their own, with a keep-alive HTTPS connection to the server."""

    def __init__(self, certs: ServingCerts, cluster: RealCluster) -> None:
        cluster.create_trainjob(NS, "tj")
        super().__init__(
            certs,
            timeout=30,
            cluster=cluster,
            kube_api_timeout=5.0,
            kube_api_qps=10_000.0,
            kube_api_burst=10_000,
        )
        self.real = cluster
        host, port = self.server.url.removeprefix("https://").rsplit(":", 1)
        self.connection = http.client.HTTPSConnection(
            host, int(port), context=certs.client_context(), timeout=10
        )

    def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        self.connection.request("POST", status_path(NS, "tj"), body=body, headers=headers)
        response = self.connection.getresponse()
        raw = response.read()
        self.run(self.server.writer.wait_idle())
        if response.getheader("Connection", "").lower() == "close":
            self.connection.close()
        return response.status, json.loads(raw)

    def trainjob(self) -> dict[str, Any]:
        obj = self.cluster.get("trainjobs", NS, "tj", GROUP)
        assert obj is not None
        return obj

    def crd_accepts(self, trainer_status: Any) -> bool:
        """The API server's verdict on the status as it would be written: a dry-run
        update of /status (unknown fields pruned, as a write prunes them)."""
        candidate = copy.deepcopy(self.trainjob())
        candidate["status"] = {"trainerStatus": trainer_status}
        path = self.real.path("trainjobs", NS, "tj", GROUP)
        code, answer = self.real.plane.request(
            "PUT", f"{path}/status?dryRun=All&fieldValidation=Ignore", candidate
        )
        assert code in (200, 422), (code, answer)
        return bool(code == 200)

    def close(self) -> None:
        self.connection.close()
        super().close()


@pytest.fixture(scope="module")
def harness(
    tmp_path_factory: pytest.TempPathFactory, control_plane: RealCluster
) -> Iterator[Harness]:
    control_plane.reset()
    running = Harness(ServingCerts.create(tmp_path_factory.mktemp("tls")), control_plane)
    yield running
    running.close()


integers = st.one_of(
    st.integers(-3, 103),
    st.sampled_from([2**31 - 1, 2**31, -(2**31), 2**63, 10**20]),
)
json_scalars = st.one_of(
    st.none(), st.booleans(), integers, st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=70),
)  # fmt: skip
short_text = st.one_of(
    st.text(min_size=0, max_size=66), st.sampled_from(["loss", "0.25", "a" * 64])
)
metric = st.one_of(
    st.fixed_dictionaries({}, optional={"name": short_text, "value": short_text}),
    json_scalars,
)
trainer_status = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "progressPercentage": st.one_of(integers, json_scalars),
            "estimatedRemainingSeconds": st.one_of(integers, json_scalars),
            "metrics": st.one_of(st.lists(metric, max_size=4), json_scalars),
            "lastUpdatedTime": st.one_of(st.sampled_from(PAST), st.text(max_size=30)),
            "unknown": json_scalars,
        },
    ),
    json_scalars,
)
bodies = st.one_of(
    st.fixed_dictionaries({}, optional={"trainerStatus": trainer_status, "x": json_scalars}),
    json_scalars,
    st.lists(json_scalars, max_size=3),
)
headers = st.fixed_dictionaries(
    {},
    optional={
        "Content-Type": st.sampled_from(["application/json", "text/plain", "", "x/y; q=1"]),
        "Authorization": st.sampled_from(["Bearer t", "bearer  t", "Basic x"]),
        "Accept": st.sampled_from(["*/*", "application/json", "text/html"]),
        # Any value HTTP allows in a header (malformed HTTP is aiohttp's parser's to refuse).
        "X-Request-Id": st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=80),
    },
)


def instant(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=bodies, sent_headers=headers)
def test_generated_posts(harness: Harness, body: Any, sent_headers: dict[str, str]) -> None:
    try:
        raw = json.dumps(body).encode()
    except ValueError:
        return
    before = harness.trainjob()
    code, answer = harness.post(raw, sent_headers)
    after = harness.trainjob()
    assert code in (200, 422), answer
    written = after["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]
    if code == 422:
        assert answer["reason"] == "Invalid"
        assert not written
        return
    if not isinstance(body, dict) or body.get("trainerStatus") is None:
        assert answer == {}
        assert not written
        return
    stored = ((before.get("status") or {}).get("trainerStatus") or {}).get("lastUpdatedTime")
    sent = answer["trainerStatus"]["lastUpdatedTime"]
    if stored is not None and instant(sent) < instant(stored):
        # Older than the stored status (an earlier example wrote the present time):
        # accepted, and dropped rather than written, so the status never goes back.
        assert not written
        return
    # Accepted: what we wrote is what the CRD accepts, and is what the answer says.
    assert after["status"]["trainerStatus"] == answer["trainerStatus"]
    assert harness.crd_accepts(answer["trainerStatus"])


@settings(max_examples=60, deadline=None)
@given(trainer=trainer_status)
def test_crd_rejections_are_ours_too(harness: Harness, trainer: Any) -> None:
    """Whatever the CRD refuses (with a time of its own), we refuse before writing."""
    if not isinstance(trainer, dict) or "lastUpdatedTime" not in trainer:
        return
    if harness.crd_accepts(trainer):
        return
    before = harness.trainjob()["metadata"]["resourceVersion"]
    code, answer = harness.post(json.dumps({"trainerStatus": trainer}).encode(), {})
    assert code == 422, answer
    assert harness.trainjob()["metadata"]["resourceVersion"] == before
