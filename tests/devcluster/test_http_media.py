"""The development cluster speaks JSON: what it answers a client that wants or sends
another media type (kubectl's typed clients send protobuf and ask for it first)."""

import pytest

from trainjob_devcluster import DevCluster

from .conftest import Api

PROTOBUF = "application/vnd.kubernetes.protobuf"


@pytest.mark.parametrize(
    "accept",
    [PROTOBUF, "application/json;as=Table;v=v1;g=meta.k8s.io", f"{PROTOBUF}, application/json;q=0"],
)
async def test_an_answer_it_cannot_give_is_406(api: Api, accept: str) -> None:
    code, body, _ = await api.call("GET", "/api/v1/namespaces", headers={"Accept": accept})
    assert (code, body["reason"], body["message"]) == (
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json (the development "
        "cluster speaks JSON only)",
    )


@pytest.mark.parametrize(
    "accept",
    [
        f"{PROTOBUF}, application/json",  # kubectl's typed clients
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",  # kubectl get
        "*/*",
    ],
)
async def test_json_among_the_accepted_types_is_served(api: Api, accept: str) -> None:
    code, body, response = await api.call("GET", "/api/v1/namespaces", headers={"Accept": accept})
    assert (code, body["kind"]) == (200, "NamespaceList")
    assert response.headers["Content-Type"] == "application/json"


async def test_a_protobuf_body_is_415_and_nothing_is_written(
    api: Api, devcluster: DevCluster
) -> None:
    # k8s\x00 and a runtime.Unknown: what `kubectl create namespace` sends.
    body = b"k8s\x00\n\x0f\n\x02v1\x12\tNamespace\x12\x0e\n\x0c\n\x06team-a"
    code, answer, _ = await api.call("POST", "/api/v1/namespaces", raw=body, content_type=PROTOBUF)
    assert (code, answer["reason"], answer["message"]) == (
        415,
        "UnsupportedMediaType",
        f"the development cluster speaks JSON only, not {PROTOBUF}: send the object as JSON "
        "or YAML (kubectl: apply --validate=false -f)",
    )
    assert devcluster.get("namespaces", "", "team-a") is None
