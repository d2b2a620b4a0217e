"""The status endpoint over real sockets against the devcluster: every rule of the request
path, with exact codes, reasons and messages, and nothing written on a refusal."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text

from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.acceptall import AcceptAll
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_both_servers, on_real_server
from trainjob_devcluster.harness.testing import eventually
from trainjob_status_server.app import StatusServer
from trainjob_status_server.config import Config

from .conftest import GROUP, NS, Poster, ServingCerts, status_path, with_changes

LUT = "2026-12-02T18:33:25Z"


def stored(cluster: KubeAPI, name: str = "tj") -> dict[str, Any]:
    obj = cluster.get("trainjobs", NS, name, GROUP)
    assert obj is not None
    return obj


def rv(cluster: KubeAPI, name: str = "tj") -> str:
    return str(stored(cluster, name)["metadata"]["resourceVersion"])


@pytest.fixture
def trainjob(kube_api: KubeAPI) -> str:
    kube_api.create_trainjob(NS, "tj")
    return "tj"


def status(body: Any) -> tuple[str, str, int]:
    return body["reason"], body["message"], body["code"]


@on_both_servers
async def test_valid_update_is_written_and_echoed(
    poster: Poster, kube_api: KubeAPI, trainjob: str
) -> None:
    update = {
        "progressPercentage": 42,
        "estimatedRemainingSeconds": 600,
        "metrics": [{"name": "loss", "value": "0.25"}, {"name": "accuracy", "value": "0.9"}],
        "lastUpdatedTime": LUT,
    }
    code, body = await poster.post(trainjob, {"trainerStatus": update, "extra": 1})
    assert (code, body) == (200, {"trainerStatus": update})
    assert stored(kube_api)["status"]["trainerStatus"] == update
    managed = [m for m in stored(kube_api)["metadata"]["managedFields"] if m.get("subresource")]
    assert [(m["manager"], m["operation"], m["subresource"]) for m in managed] == [
        ("trainer-status", "Apply", "status")
    ]


@on_real_server
async def test_a_field_left_out_is_removed(
    poster: Poster, kube_api: KubeAPI, trainjob: str
) -> None:
    first = {"progressPercentage": 10, "estimatedRemainingSeconds": 60, "lastUpdatedTime": LUT}
    assert (await poster.post(trainjob, {"trainerStatus": first}))[0] == 200
    second = {"estimatedRemainingSeconds": 30, "lastUpdatedTime": "2026-12-02T18:34:00Z"}
    assert (await poster.post(trainjob, {"trainerStatus": second}))[0] == 200
    assert stored(kube_api)["status"]["trainerStatus"] == second


@on_both_servers
@pytest.mark.parametrize("body", [{}, {"trainerStatus": None}, {"other": {"x": 1}}])
async def test_nothing_to_write_answers_200_and_writes_nothing(
    poster: Poster, kube_api: KubeAPI, trainjob: str, body: dict[str, Any]
) -> None:
    before = rv(kube_api)
    if isinstance(kube_api, DevCluster):  # counts: devcluster only
        kube_api.faults.reset_counts()
    assert await poster.post(trainjob, body) == (200, {})
    assert rv(kube_api) == before
    if isinstance(kube_api, DevCluster):  # counts: devcluster only
        assert kube_api.faults.count("patch") == 0


@on_both_servers
async def test_progress_150_is_refused_as_the_api_server_words_it(
    poster: Poster, kube_api: KubeAPI, trainjob: str
) -> None:
    before = rv(kube_api)
    if isinstance(kube_api, DevCluster):  # counts: devcluster only
        kube_api.faults.reset_counts()
    code, body = await poster.post(
        trainjob, {"trainerStatus": {"progressPercentage": 150, "lastUpdatedTime": LUT}}
    )
    assert code == 422
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'TrainJob.trainer.kubeflow.org "tj" is invalid: '
        "status.trainerStatus.progressPercentage: Invalid value: 150: "
        "trainerStatus.progressPercentage in body should be less than or equal to 100",
        "reason": "Invalid",
        "details": {
            "name": "tj",
            "group": "trainer.kubeflow.org",
            "kind": "TrainJob",
            "causes": [
                {
                    "reason": "FieldValueInvalid",
                    "message": "Invalid value: 150: trainerStatus.progressPercentage in body "
                    "should be less than or equal to 100",
                    "field": "status.trainerStatus.progressPercentage",
                }
            ],
        },
        "code": 422,
    }
    assert rv(kube_api) == before
    if isinstance(kube_api, DevCluster):  # counts: devcluster only
        assert kube_api.faults.count("patch") == 0


async def test_all_violations_come_in_one_answer(
    poster: Poster, devcluster: DevCluster, trainjob: str
) -> None:
    code, body = await poster.post(
        trainjob,
        {
            "trainerStatus": {
                "progressPercentage": 150,
                "estimatedRemainingSeconds": -5,
                "lastUpdatedTime": LUT,
            }
        },
    )
    assert code == 422
    assert body["message"] == (
        'TrainJob.trainer.kubeflow.org "tj" is invalid: [status.trainerStatus.progressPercentage: '
        "Invalid value: 150: trainerStatus.progressPercentage in body should be less than or "
        "equal to 100, status.trainerStatus.estimatedRemainingSeconds: Invalid value: -5: "
        "trainerStatus.estimatedRemainingSeconds in body should be greater than or equal to 0]"
    )
    assert [c["field"] for c in body["details"]["causes"]] == [
        "status.trainerStatus.progressPercentage",
        "status.trainerStatus.estimatedRemainingSeconds",
    ]


@on_both_servers
async def test_missing_trainjob_is_404_and_not_created(poster: Poster, kube_api: KubeAPI) -> None:
    kube_api.ensure_namespace(NS)
    code, body = await poster.post(
        "ghost", {"trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": LUT}}
    )
    assert code == 404
    assert status(body) == ("NotFound", "Train job not found", 404)
    assert kube_api.get("trainjobs", NS, "ghost", GROUP) is None
    if isinstance(kube_api, DevCluster):  # counts: devcluster only
        assert kube_api.faults.count("patch") == 0


async def test_posts_for_a_missing_trainjob_cost_one_lookup_until_it_appears(
    poster: Poster, devcluster: DevCluster
) -> None:
    devcluster.ensure_namespace(NS)
    devcluster.faults.reset_counts()
    update = {"trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": LUT}}
    for _ in range(5):
        code, body = await poster.post("late", update)
        assert (code, status(body)) == (404, ("NotFound", "Train job not found", 404))
    assert devcluster.faults.count("get", "trainjobs") == 1
    # Created now: the watch shows it, and the next post is written without a lookup.
    devcluster.create_trainjob(NS, "late")

    async def cached() -> bool:
        return poster.server.trainjobs.get(NS, "late") is not None

    await eventually(cached, "the new TrainJob in the server's cache", within=10, every=0.01)
    assert (await poster.post("late", update))[0] == 200
    await poster.server.writer.wait_idle()
    assert stored(devcluster, "late")["status"]["trainerStatus"]["progressPercentage"] == 1
    assert devcluster.faults.count("get", "trainjobs") == 1


async def test_a_trainjob_created_a_moment_ago_is_found(
    poster: Poster, devcluster: DevCluster, server: StatusServer
) -> None:
    devcluster.create_trainjob(NS, "fresh")
    code, _ = await poster.post(
        "fresh", {"trainerStatus": {"progressPercentage": 3, "lastUpdatedTime": LUT}}
    )
    assert code == 200
    assert stored(devcluster, "fresh")["status"]["trainerStatus"]["progressPercentage"] == 3


async def test_a_one_megabyte_body_is_413_by_content_length(
    poster: Poster, devcluster: DevCluster, trainjob: str
) -> None:
    before = rv(devcluster)
    code, body = await poster.post(trainjob, None, raw=b"{" + b" " * 1_000_000 + b"}")
    assert code == 413
    assert status(body) == ("RequestEntityTooLarge", "Payload too large", 413)
    assert rv(devcluster) == before


async def test_a_chunked_body_over_the_limit_is_413(
    poster: Poster, devcluster: DevCluster, trainjob: str
) -> None:
    before = rv(devcluster)

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"pad": "'
        for _ in range(20):
            yield b"x" * 4096
        yield b'"}'

    code, body, response = await poster.request(
        "POST", status_path(NS, trainjob), chunks(), {"Authorization": "Bearer t"}
    )  # type: ignore[arg-type]  # aiohttp streams an async iterator chunked
    assert code == 413
    assert status(body) == ("RequestEntityTooLarge", "Payload too large", 413)
    assert response.headers.get("Connection", "").lower() == "close"
    assert rv(devcluster) == before


async def test_a_body_of_exactly_64_kib_is_accepted(
    poster: Poster, devcluster: DevCluster, trainjob: str
) -> None:
    head = json.dumps({"trainerStatus": {"progressPercentage": 5, "lastUpdatedTime": LUT}})
    filler = 65_536 - len(head) - len(', "pad": ""')
    raw = (head[:-1] + ', "pad": "' + "x" * filler + '"}').encode()
    assert len(raw) == 65_536
    assert (await poster.post(trainjob, None, raw=raw))[0] == 200
    code, body = await poster.post(trainjob, None, raw=raw[:-2] + b'x"}')
    assert (code, body["reason"]) == (413, "RequestEntityTooLarge")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            b"not json",
            "Invalid payload: body is not valid JSON: Expecting value: line 1 column 1 (char 0)",
        ),
        (b"[1, 2]", "Invalid payload: body must be a JSON object, got array"),
        (
            b'{"trainerStatus": {"progressPercentage": "50"}}',
            "Invalid payload: trainerStatus.progressPercentage: must be an integer, got string",
        ),
    ],
)
async def test_bodies_that_do_not_decode_are_invalid_payload(
    poster: Poster, devcluster: DevCluster, trainjob: str, raw: bytes, message: str
) -> None:
    before = rv(devcluster)
    code, body = await poster.post(trainjob, None, raw=raw)
    assert code == 422
    assert status(body) == ("Invalid", message, 422)
    assert rv(devcluster) == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", status_path(NS, "tj")),
        ("PUT", status_path(NS, "tj")),
        ("PATCH", status_path(NS, "tj")),
        ("DELETE", status_path(NS, "tj")),
        ("POST", "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team-a/trainjobs/tj"),
        ("POST", "/apis/trainer.kubeflow.org/v1/namespaces/team-a/trainjobs/tj/status"),
        ("POST", "/"),
        ("GET", "/metrics"),
    ],
)
async def test_any_other_path_or_method_is_the_peers_404(
    poster: Poster, devcluster: DevCluster, trainjob: str, method: str, path: str
) -> None:
    before = rv(devcluster)
    code, body, _ = await poster.request(method, path, b"{}")
    assert code == 404
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Not found",
        "reason": "NotFound",
        "code": 404,
    }
    assert rv(devcluster) == before


async def test_no_content_type_is_required(
    poster: Poster, devcluster: DevCluster, trainjob: str, server: StatusServer
) -> None:
    body = json.dumps({"trainerStatus": {"progressPercentage": 9, "lastUpdatedTime": LUT}})
    async with poster.session.post(
        server.url + status_path(NS, trainjob),
        data=body.encode(),
        headers={"Authorization": "Bearer t"},
        skip_auto_headers=["Content-Type"],
    ) as response:
        assert "Content-Type" not in response.request_info.headers
        assert response.status == 200
    await server.writer.wait_idle()
    assert stored(devcluster)["status"]["trainerStatus"]["progressPercentage"] == 9


@on_both_servers
async def test_missing_last_updated_time_is_stamped_with_the_receive_time(
    poster: Poster, kube_api: KubeAPI, trainjob: str
) -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    code, body = await poster.post(trainjob, {"trainerStatus": {"progressPercentage": 1}})
    after = dt.datetime.now(dt.UTC)
    assert code == 200
    written = stored(kube_api)["status"]["trainerStatus"]["lastUpdatedTime"]
    assert body["trainerStatus"]["lastUpdatedTime"] == written
    stamped = dt.datetime.fromisoformat(written)
    assert before <= stamped <= after


@on_both_servers
async def test_a_time_far_in_the_future_is_refused(
    poster: Poster, kube_api: KubeAPI, trainjob: str
) -> None:
    before = rv(kube_api)
    future = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    code, body = await poster.post(trainjob, {"trainerStatus": {"lastUpdatedTime": future}})
    assert code == 422
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "status.trainerStatus.lastUpdatedTime"
    assert body["message"].startswith(
        f'TrainJob.trainer.kubeflow.org "tj" is invalid: status.trainerStatus.lastUpdatedTime: '
        f'Invalid value: "{future}": must not be more than 5 minutes after the time the '
        "server received it ("
    )
    assert rv(kube_api) == before


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-03T18:32:25+23:59",
        "2026-12-01T18:34:25-23:59",
        "2026-12-02T20:33:25.000000+02:00",
    ],
)
async def test_an_rfc_3339_time_is_stored_as_the_instant_the_client_sent(
    poster: Poster, devcluster: DevCluster, server: StatusServer, trainjob: str, text: str
) -> None:
    code, body = await poster.post(
        trainjob, {"trainerStatus": {"progressPercentage": 5, "lastUpdatedTime": text}}
    )
    assert (code, body["trainerStatus"]["lastUpdatedTime"]) == (200, LUT)
    await server.writer.wait_idle()
    assert stored(devcluster)["status"]["trainerStatus"]["lastUpdatedTime"] == LUT


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "2026-12-02t18:33:25Z",
            'parsing time "2026-12-02t18:33:25Z" as "2006-01-02T15:04:05": '
            'cannot parse "t18:33:25Z" as "T"',
        ),
        ("2026-12-02T18:33:25z", 'parsing time "2026-12-02T18:33:25z": extra text: "z"'),
    ],
)
async def test_a_lower_case_t_or_z_is_refused_as_the_crds_rule_refuses_it(
    poster: Poster, devcluster: DevCluster, trainjob: str, text: str, error: str
) -> None:
    """RFC 3339 allows "t" and "z"; the CRD's CEL rule reads the time with Go's layouts,
    which do not, so the API server would refuse the write: refused here, at the post,
    with the API server's words (recorded from kube-apiserver), and nothing written."""
    before = rv(devcluster)
    devcluster.faults.reset_counts()
    code, body = await poster.post(
        trainjob, {"trainerStatus": {"progressPercentage": 5, "lastUpdatedTime": text}}
    )
    cause = (
        f'Invalid value: "object": Invalid date-time formatted string {text}: {error} '
        "evaluating rule: lastUpdatedTime is required when trainerStatus is present"
    )
    assert code == 422
    assert body["message"] == (
        f'TrainJob.trainer.kubeflow.org "tj" is invalid: status.trainerStatus: {cause}'
    )
    assert body["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "message": cause, "field": "status.trainerStatus"}
    ]
    assert devcluster.faults.count("patch") == 0
    assert rv(devcluster) == before


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-02T18:33:25+99:99",  # the API server's date-time check takes these three
        "2026-12-02T18:33:25Ztrailing",
        "2026-12-02T18:33:25,5Z",
        "2026-12-02T18:33:25+24:00",
        "2026-12-02T18:33:25",
    ],
)
async def test_a_last_updated_time_that_is_not_rfc_3339_is_refused_and_nothing_is_written(
    poster: Poster, devcluster: DevCluster, trainjob: str, text: str
) -> None:
    before = rv(devcluster)
    devcluster.faults.reset_counts()
    code, body = await poster.post(
        trainjob, {"trainerStatus": {"progressPercentage": 5, "lastUpdatedTime": text}}
    )
    quoted = json.dumps(text)
    cause = (
        f"Invalid value: {quoted}: trainerStatus.lastUpdatedTime in body must be of type "
        f"date-time: {quoted}"
    )
    not_checked = (
        "Invalid value: null: some validation rules were not checked because the object "
        "was invalid; correct the existing errors to complete validation"
    )
    assert code == 422
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'TrainJob.trainer.kubeflow.org "tj" is invalid: '
        f"[status.trainerStatus.lastUpdatedTime: {cause}, <nil>: {not_checked}]",
        "reason": "Invalid",
        "details": {
            "name": "tj",
            "group": "trainer.kubeflow.org",
            "kind": "TrainJob",
            "causes": [
                {
                    "reason": "FieldValueTypeInvalid",
                    "message": cause,
                    "field": "status.trainerStatus.lastUpdatedTime",
                },
                {"reason": "FieldValueInvalid", "message": not_checked, "field": "<nil>"},
            ],
        },
        "code": 422,
    }
    assert rv(devcluster) == before
    assert devcluster.faults.count("patch") == 0
    assert "status" not in stored(devcluster)


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        (500, ("InternalError", "Internal error", 500)),
        (409, ("InternalError", "Internal error", 500)),
        (503, ("ServiceUnavailable", "The Kubernetes API server is unavailable", 503)),
        (429, ("ServiceUnavailable", "The Kubernetes API server is unavailable", 503)),
    ],
)
async def test_api_errors_map_to_status(
    direct_poster: Poster,
    devcluster: DevCluster,
    trainjob: str,
    fault: int,
    expected: tuple[str, str, int],
) -> None:
    before = rv(devcluster)
    devcluster.faults.fail(fault, times=None, verb="patch", resource="trainjobs/status")
    code, body = await direct_poster.post(
        trainjob, {"trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": LUT}}
    )
    assert (code, status(body)) == (expected[2], expected)
    assert rv(devcluster) == before


async def test_api_422_passes_the_api_servers_message_through(
    direct_poster: Poster, devcluster: DevCluster, trainjob: str
) -> None:
    message = 'TrainJob.trainer.kubeflow.org "tj" is invalid: status: Invalid value: "x": nope'
    devcluster.faults.fail(422, message=message, verb="patch", resource="trainjobs/status")
    code, body = await direct_poster.post(
        trainjob, {"trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": LUT}}
    )
    assert (code, body["reason"], body["message"]) == (422, "Invalid", message)


async def test_a_stalled_api_server_gives_503_within_the_timeout(
    direct_poster: Poster,
    devcluster: DevCluster,
    trainjob: str,
) -> None:
    devcluster.faults.stall(30, times=None, verb="patch", resource="trainjobs/status")
    loop = asyncio.get_running_loop()
    started = loop.time()
    code, body = await direct_poster.post(
        trainjob, {"trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": LUT}}
    )
    assert (code, body["reason"]) == (503, "ServiceUnavailable")
    assert body["details"] == {"retryAfterSeconds": 1}
    # Bounded by the configured API timeout (2 s here), far from the 30 s stall.
    assert loop.time() - started < direct_poster.server.config.kube_api_timeout + 3


async def test_health_and_readiness_on_both_ports(poster: Poster, server: StatusServer) -> None:
    for base in (server.url, server.metrics_url):
        for path in ("/healthz", "/readyz"):
            async with poster.session.get(base + path) as response:
                assert (response.status, await response.text()) == (200, "ok")
    async with poster.session.get(server.metrics_url + "/metrics") as response:
        assert response.status == 200
        assert "process_cpu_seconds_total" in await response.text()


async def test_one_log_line_per_request_without_the_token(
    poster: Poster, trainjob: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trainjob_status_server.access")
    token = "eyJhbGciOiJSUzI1NiJ9.secret-part.signature"
    async with poster.session.post(
        poster.server.url + status_path(NS, trainjob),
        data=b'{"trainerStatus": {"progressPercentage": 2}}',
        headers={"Authorization": f"Bearer {token}", "X-Request-Id": "req-1"},
    ) as response:
        assert response.status == 200
        assert response.headers["X-Request-Id"] == "req-1"
    lines = [r for r in caplog.records if r.name == "trainjob_status_server.access"]
    assert len(lines) == 1
    line = lines[0].__dict__
    assert (line["method"], line["code"], line["trainjob"], line["request_id"]) == (
        "POST",
        200,
        f"{NS}/tj",
        "req-1",
    )
    assert line["path"] == status_path(NS, "tj")
    for record in caplog.records:
        assert "secret-part" not in json.dumps(record.__dict__, default=str)


async def test_at_info_only_refused_posts_are_logged(
    poster: Poster, trainjob: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Accepted posts are routine (thousands a second): debug. Refusals show at info."""
    caplog.set_level(logging.INFO, logger="trainjob_status_server.access")
    assert (await poster.post(trainjob, {"trainerStatus": {"progressPercentage": 3}}))[0] == 200
    assert (await poster.post("missing", {"trainerStatus": {"progressPercentage": 3}}))[0] == 404
    lines = [r for r in caplog.records if r.name == "trainjob_status_server.access"]
    assert [(r.levelno, r.__dict__["code"], r.__dict__["trainjob"]) for r in lines] == [
        (logging.INFO, 404, f"{NS}/missing")
    ]


async def scrape_requests(poster: Poster) -> dict[str, float]:
    """trainjob_status_requests_total by code, and the duration histogram's count."""
    async with poster.session.get(poster.server.metrics_url + "/metrics") as response:
        text = await response.text()
    found: dict[str, float] = {}
    for family in parse_text(text):
        for sample in family.samples:
            if sample.name == "trainjob_status_requests_total":
                found[sample.labels["code"]] = sample.value
            if sample.name == "trainjob_status_request_duration_seconds_count":
                found["count"] = sample.value
    return found


async def test_posts_are_counted_by_code_and_timed_probes_are_not(
    poster: Poster, trainjob: str
) -> None:
    before = await scrape_requests(poster)
    assert (await poster.post(trainjob, {"trainerStatus": {"progressPercentage": 4}}))[0] == 200
    assert (await poster.post(trainjob, {"trainerStatus": {"progressPercentage": 400}}))[0] == 422
    for path in ("/healthz", "/readyz"):
        async with poster.session.get(poster.server.url + path) as response:
            assert response.status == 200
    after = await scrape_requests(poster)
    delta = {key: after[key] - before.get(key, 0.0) for key in after}
    assert {key: value for key, value in delta.items() if value} == {
        "200": 1.0,
        "422": 1.0,
        "count": 2.0,
    }


async def test_a_request_id_that_could_forge_log_lines_is_replaced(
    poster: Poster, trainjob: str
) -> None:
    async with poster.session.get(
        poster.server.url + "/healthz", headers={"X-Request-Id": 'a code=200 forged="1"'}
    ) as response:
        assert response.headers["X-Request-Id"] != 'a code=200 forged="1"'
        assert len(response.headers["X-Request-Id"]) == 16


async def test_a_stalled_api_server_gives_503_for_an_unknown_trainjob(
    poster: Poster, devcluster: DevCluster
) -> None:
    """Coalescing mode answers once the update is queued, but a TrainJob the cache has not
    seen needs one GET: a stalled API server makes that a 503 within the timeout. (None
    is created: the watch open already would bring a new one to the cache, at a moment
    a loaded machine makes racy.)"""
    devcluster.ensure_namespace(NS)
    devcluster.faults.stall(30, times=None, verb="get", resource="trainjobs")
    devcluster.faults.stall(30, times=None, verb="watch", resource="trainjobs")
    loop = asyncio.get_running_loop()
    started = loop.time()
    code, body = await poster.post(
        "unseen", {"trainerStatus": {"progressPercentage": 1, "lastUpdatedTime": LUT}}
    )
    assert (code, body["reason"]) == (503, "ServiceUnavailable")
    assert loop.time() - started < poster.server.config.kube_api_timeout + 3


async def test_a_body_that_stalls_gets_408_and_nothing_is_written(
    config: Config, certs: ServingCerts, devcluster: DevCluster
) -> None:
    """A client that announces a body and sends only part of it is answered 408 once
    --read-timeout has passed, with Connection: close."""
    devcluster.create_trainjob(NS, "tj")
    before = rv(devcluster)
    async with StatusServer(with_changes(config, read_timeout=0.5), AcceptAll()) as running:
        await running.trainjobs.synced.wait()
        host, port = running.url.removeprefix("https://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(
            host, int(port), ssl=certs.client_context(), server_hostname="localhost"
        )
        path = status_path(NS, "tj")
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer t\r\n"
            f"Content-Type: application/json\r\nContent-Length: 60\r\n\r\n".encode()
            + b'{"trainerStatus": {"progressPercentage"'
        )
        await writer.drain()
        loop = asyncio.get_running_loop()
        started = loop.time()
        answer = b""
        while b'"code":408}' not in answer:
            more = await asyncio.wait_for(reader.read(4096), 10)
            assert more, answer
            answer += more
        waited = loop.time() - started
        # The server then closes the connection: at once for a client that sends
        # nothing more, after at most the 2 s it spends draining an unread body.
        answered = loop.time()
        assert await asyncio.wait_for(reader.read(4096), 10) == b""
        closed_after = loop.time() - answered
        writer.close()
    assert closed_after < 4
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 ")
    assert b"Connection: close" in head.split(b"\r\n")
    assert status(json.loads(body)) == ("Timeout", "Request body not received in time", 408)
    assert 0.4 < waited < 5
    assert rv(devcluster) == before
