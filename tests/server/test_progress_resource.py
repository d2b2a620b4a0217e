"""The aggregated API's decisions (pure): which read a path asks for, who a proxied
request comes from, the objects and tables it answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from multidict import CIMultiDict

from trainjob_status_server.config import Config
from trainjob_status_server.progress import frontproxy, resource
from trainjob_status_server.progress.frontproxy import SettingsError, User
from trainjob_status_server.progress.resource import Read

ROOT = f"/apis/{resource.GROUP_VERSION}"
CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
PROXY_CERT = {"subject": ((("commonName", "front-proxy-client"),),)}


@pytest.mark.parametrize(
    ("path", "read"),
    [
        (f"{ROOT}/trainjobprogresses", Read(None, None)),
        (f"{ROOT}/namespaces/team-a/trainjobprogresses", Read("team-a", None)),
        (f"{ROOT}/namespaces/team-a/trainjobprogresses/llama", Read("team-a", "llama")),
        (f"{ROOT}/trainjobprogresses/llama", None),  # a name needs its namespace
        (f"{ROOT}/namespaces/team-a/trainjobs/llama", None),
        (f"{ROOT}/namespaces/team-a/trainjobprogresses/llama/status", None),
        ("/apis/trainer.kubeflow.org/v1alpha1/trainjobprogresses", None),
    ],
)
def test_the_read_a_path_asks_for(path: str, read: Read | None) -> None:
    assert resource.read_of(path) == read


def test_a_reads_verb() -> None:
    assert Read("team-a", None).verb == "list"
    assert Read("team-a", "llama").verb == "get"


def test_settings_from_the_api_servers_configmap() -> None:
    settings = frontproxy.settings_of(
        {
            "requestheader-client-ca-file": CA,
            "requestheader-allowed-names": '["front-proxy-client"]',
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
            "requestheader-extra-headers-prefix": '["X-Remote-Extra-"]',
            "requestheader-uid-headers": '["X-Remote-Uid"]',
        }
    )
    assert settings == frontproxy.RequestHeaderSettings(
        CA,
        allowed_names=("front-proxy-client",),
        username_headers=("X-Remote-User",),
        uid_headers=("X-Remote-Uid",),
        group_headers=("X-Remote-Group",),
        extra_prefixes=("X-Remote-Extra-",),
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "no requestheader-client-ca-file: the API server has no front proxy"),
        (
            {"requestheader-client-ca-file": CA, "requestheader-allowed-names": "[1]"},
            "requestheader-allowed-names is not a list of strings",
        ),
        (
            {"requestheader-client-ca-file": CA, "requestheader-group-headers": "{"},
            "requestheader-group-headers is not JSON",
        ),
        (
            {"requestheader-client-ca-file": CA, "requestheader-username-headers": "[]"},
            "requestheader-username-headers is empty",
        ),
    ],
)
def test_settings_that_say_nothing_usable_are_refused(data: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        frontproxy.settings_of(data)


def headers(*pairs: tuple[str, str]) -> CIMultiDict[str]:
    return CIMultiDict(pairs)


def test_the_user_the_front_proxy_names() -> None:
    settings = frontproxy.RequestHeaderSettings(CA, allowed_names=("front-proxy-client",))
    user = frontproxy.proxied_user(
        settings,
        PROXY_CERT,
        headers(
            ("X-Remote-User", "alice"),
            ("X-Remote-Group", "team-a"),
            ("X-Remote-Group", "system:authenticated"),
            ("X-Remote-Extra-Scopes", "read"),
            ("X-Remote-Extra-Acme.com%2fproject", "llm"),
        ),
    )
    assert user == User(
        "alice",
        groups=("team-a", "system:authenticated"),
        extra={"scopes": ("read",), "acme.com/project": ("llm",)},
    )
    assert user.review_fields() == {
        "user": "alice",
        "groups": ["team-a", "system:authenticated"],
        "extra": {"scopes": ["read"], "acme.com/project": ["llm"]},
    }


@pytest.mark.parametrize(
    ("peercert", "sent"),
    [
        (None, (("X-Remote-User", "alice"),)),  # no verified certificate
        ({"subject": ((("commonName", "someone"),),)}, (("X-Remote-User", "alice"),)),
        (PROXY_CERT, ()),  # no user
        (PROXY_CERT, (("X-Remote-User", ""),)),
    ],
)
def test_no_one_without_the_proxys_certificate_and_a_user(
    peercert: dict[str, object] | None, sent: tuple[tuple[str, str], ...]
) -> None:
    settings = frontproxy.RequestHeaderSettings(CA, allowed_names=("front-proxy-client",))
    assert frontproxy.proxied_user(settings, peercert, headers(*sent)) is None


def test_any_name_of_the_proxys_ca_when_none_is_listed() -> None:
    settings = frontproxy.RequestHeaderSettings(CA)
    someone = {"subject": ((("commonName", "someone"),),)}
    user = frontproxy.proxied_user(settings, someone, headers(("X-Remote-User", "bob")))
    assert user == User("bob")


VIEW = {
    "metadata": {"name": "llama", "namespace": "team-a", "uid": "u1", "resourceVersion": "7"},
    "status": {
        "trainerStatus": {
            "progressPercentage": 42,
            "estimatedRemainingSeconds": 5400,
            "metrics": (("loss", "0.4"), ("accuracy", "0.9")),
            "lastUpdatedTime": "2026-12-01T10:00:00Z",
        }
    },
}


def test_a_progress_object_has_the_trainjobs_identity_and_the_status_shape() -> None:
    item = resource.progress_object(VIEW, stored=True)
    assert item == {
        "kind": "TrainJobProgress",
        "apiVersion": "trainjob-status.kubeflow.org/v1alpha1",
        "metadata": {"name": "llama", "namespace": "team-a", "uid": "u1"},
        "trainerStatus": {
            "progressPercentage": 42,
            "estimatedRemainingSeconds": 5400,
            "metrics": [{"name": "loss", "value": "0.4"}, {"name": "accuracy", "value": "0.9"}],
            "lastUpdatedTime": "2026-12-01T10:00:00Z",
        },
        "stored": True,
    }
    json.dumps(item)  # serialisable as it is
    assert resource.progress_object({"metadata": VIEW["metadata"]}, stored=True) is None


def test_a_table_as_kubectl_prints_it() -> None:
    item = resource.progress_object(VIEW, stored=False)
    assert item is not None
    now = 1_796_119_200.0 + 90  # 2026-12-01T10:01:30Z
    (row,) = resource.table([item], now)["rows"]
    assert row["cells"] == ["llama", "42%", "90m", "90s", False]
    assert row["object"]["metadata"]["name"] == "llama"


@pytest.mark.parametrize(
    ("accept", "table"),
    [
        ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json", True),
        ("application/json; as=Table; g=meta.k8s.io; v=v1", True),
        ("application/json", False),
        ("application/json,application/json;as=Table;v=v1;g=meta.k8s.io", False),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io", False),
    ],
)
def test_who_asks_for_a_table(accept: str, table: bool) -> None:
    assert resource.wants_table(accept) is table


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"progress_api_port": 10443}, "--progress-api-port must differ from the other ports"),
        ({"progress_api_port": 70000}, "--progress-api-port must be 0..65535, got 70000"),
        (
            {"progress_api_port": 8445, "insecure_http": True, "tls_cert_file": None},
            "--progress-api-port needs the serving certificate: not --insecure-http",
        ),
    ],
)
def test_the_port_flags_problems(changes: dict[str, object], problem: str) -> None:
    base = {"tls_cert_file": Path("tls.crt"), "tls_key_file": Path("tls.key")}
    config = Config(**{**base, **changes})  # type: ignore[arg-type]
    assert problem in config.check()
