"""Flags, environment fallbacks and the checks ``serve`` runs before it starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainjob_status_server import cli
from trainjob_status_server.config import Config, from_args


def parse(*argv: str, env: dict[str, str] | None = None) -> Config:
    args = cli.build_parser().parse_args(["serve", *argv])
    return from_args(args, env or {})


def test_defaults_are_the_peers() -> None:
    config = parse()
    assert (config.port, config.metrics_port) == (10443, 9090)
    assert (config.kube_api_qps, config.kube_api_burst) == (5.0, 10)
    assert (config.read_timeout, config.idle_timeout) == (10.0, 120.0)
    assert config.tls_min_version == "1.2"
    assert config.insecure_http is False


def test_flags_win_over_environment_which_wins_over_defaults() -> None:
    env = {"TRAINJOB_STATUS_PORT": "8443", "TRAINJOB_STATUS_KUBE_API_QPS": "20"}
    config = parse("--port", "9443", env=env)
    assert config.port == 9443
    assert config.kube_api_qps == 20.0
    assert parse(env={"TRAINJOB_STATUS_INSECURE_HTTP": "true"}).insecure_http is True
    assert parse(env={"TRAINJOB_STATUS_TLS_CERT_FILE": "/x/tls.crt"}).tls_cert_file == Path(
        "/x/tls.crt"
    )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"TRAINJOB_STATUS_PORT": "http"},
            "TRAINJOB_STATUS_PORT='http': invalid literal for int() with base 10: 'http'",
        ),
        (
            {"TRAINJOB_STATUS_LOG_FORMAT": "xml"},
            "TRAINJOB_STATUS_LOG_FORMAT='xml': must be one of ('json', 'text')",
        ),
        (
            {"TRAINJOB_STATUS_INSECURE_HTTP": "maybe"},
            "TRAINJOB_STATUS_INSECURE_HTTP='maybe': not a boolean: 'maybe'",
        ),
    ],
)
def test_a_bad_environment_value_is_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(
        ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"
    ):
        parse(env=env)


def test_checks() -> None:
    assert parse().check() == [
        "--tls-cert-file and --tls-key-file are required (or --insecure-http for local use)"
    ]
    assert parse("--insecure-http").check() == []
    assert parse("--insecure-http", "--tls-cert-file", "c").check() == [
        "--insecure-http cannot be combined with TLS files"
    ]
    assert parse("--insecure-http", "--port", "9090").check() == [
        "--port and --metrics-port must differ"
    ]
    assert parse("--insecure-http", "--kube-api-qps", "0").check() == [
        "--kube-api-qps must be > 0 and --kube-api-burst >= 1"
    ]
    assert parse("--insecure-http", "--max-metric-names-per-trainjob", "-1").check() == [
        "--max-metric-names-per-trainjob must be >= 0 (0: no limit)"
    ]
    assert parse("--insecure-http", "--kube-auth-burst", "0", "--kube-watch-qps", "-1").check() == [
        "--kube-auth-qps must be > 0 and --kube-auth-burst >= 1",
        "--kube-watch-qps must be > 0 and --kube-watch-burst >= 1",
    ]


def test_serve_refuses_to_start_without_tls() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trainjob_status_server.cli", "serve"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "trainjob-status-server serve: --tls-cert-file and --tls-key-file are required "
        "(or --insecure-http for local use)\n"
    )


def test_help_names_every_flag_and_its_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["serve", "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for flag, env in [
        ("--port", "TRAINJOB_STATUS_PORT"),
        ("--metrics-port", "TRAINJOB_STATUS_METRICS_PORT"),
        ("--tls-cert-file", "TRAINJOB_STATUS_TLS_CERT_FILE"),
        ("--kubeconfig", "TRAINJOB_STATUS_KUBECONFIG"),
        ("--issuer", "TRAINJOB_STATUS_ISSUER"),
        ("--kube-api-qps", "TRAINJOB_STATUS_KUBE_API_QPS"),
        ("--shutdown-timeout", "TRAINJOB_STATUS_SHUTDOWN_TIMEOUT"),
        ("--insecure-http", "TRAINJOB_STATUS_INSECURE_HTTP"),
    ]:
        assert flag in text
        assert env in " ".join(text.split())
