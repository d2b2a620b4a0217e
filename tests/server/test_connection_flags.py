"""The connection flags: their defaults, environment fallbacks, checks and --help text."""

from __future__ import annotations

import pytest

from trainjob_status_server import cli
from trainjob_status_server.config import Config, from_args


def parse(*argv: str, env: dict[str, str] | None = None) -> Config:
    return from_args(cli.build_parser().parse_args(["serve", "--insecure-http", *argv]), env or {})


def test_defaults() -> None:
    config = parse()
    assert config.max_header_bytes == 8192
    assert config.write_timeout == 10.0  # the Trainer's write timeout
    assert (config.max_connections, config.max_connections_per_ip) == (1024, 256)
    assert config.probe_port == 8081
    # Short: a client sends its request as soon as it has connected.
    assert (config.first_request_timeout, config.read_timeout) == (5.0, 10.0)


def test_flags_and_their_environment_fallbacks() -> None:
    env = {
        "TRAINJOB_STATUS_MAX_HEADER_BYTES": "4096",
        "TRAINJOB_STATUS_WRITE_TIMEOUT": "2.5",
        "TRAINJOB_STATUS_MAX_CONNECTIONS_PER_IP": "32",
        "TRAINJOB_STATUS_PROBE_PORT": "18081",
        "TRAINJOB_STATUS_FIRST_REQUEST_TIMEOUT": "1.5",
    }
    config = parse(env=env)
    assert (config.max_header_bytes, config.write_timeout) == (4096, 2.5)
    assert (config.max_connections_per_ip, config.probe_port) == (32, 18081)
    assert config.first_request_timeout == 1.5
    assert parse("--max-header-bytes", "16384", env=env).max_header_bytes == 16384


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (
            ("--max-header-bytes", "1024"),
            "--max-header-bytes must be >= 2048 (a post with its token needs about 2 KiB)",
        ),
        (("--write-timeout", "0"), "--write-timeout must be > 0"),
        (("--first-request-timeout", "0"), "--first-request-timeout must be > 0"),
        (
            ("--max-connections-per-ip", "0"),
            "--max-connections and --max-connections-per-ip must be >= 1",
        ),
        (("--probe-port", "70000"), "--probe-port must be 0..65535, got 70000"),
        (
            ("--probe-port", "9090"),
            "--probe-port must differ from --port and --metrics-port",
        ),
        (("--webhook-port", "-1"), "--webhook-port must be 0..65535, got -1"),
        (
            ("--webhook-port", "10443"),
            "--webhook-port must differ from --port, --metrics-port and --probe-port",
        ),
        (
            ("--webhook-port", "8081"),
            "--webhook-port must differ from --port, --metrics-port and --probe-port",
        ),
    ],
)
def test_checks(argv: tuple[str, ...], problem: str) -> None:
    assert parse(*argv).check() == [problem]


def test_help_describes_each_flag_with_its_variable_and_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for flag, env, default in [
        ("--max-header-bytes", "TRAINJOB_STATUS_MAX_HEADER_BYTES", "8192"),
        ("--write-timeout", "TRAINJOB_STATUS_WRITE_TIMEOUT", "10.0"),
        ("--max-connections-per-ip", "TRAINJOB_STATUS_MAX_CONNECTIONS_PER_IP", "256"),
        ("--probe-port", "TRAINJOB_STATUS_PROBE_PORT", "8081"),
        ("--webhook-port", "TRAINJOB_STATUS_WEBHOOK_PORT", "9443"),
        ("--first-request-timeout", "TRAINJOB_STATUS_FIRST_REQUEST_TIMEOUT", "5.0"),
    ]:
        assert flag in text
        assert f"(env {env}; default {default})" in text
    assert "over it: 431 and the connection closes" in text
