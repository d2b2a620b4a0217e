"""``trainjob-status-server serve`` refusing to start, run as a subprocess: a missing TLS
file, a pair that does not load, no Kubernetes configuration outside a cluster, one that
does not load, a bad flag value. Each is one line on stderr naming the problem, exit
status 2, no traceback, nothing on stdout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainjob_status_server.cli import (
    build_parser,
    startup_problems,
    with_kubeconfig_from_environment,
)
from trainjob_status_server.config import from_args

from .conftest import ServingCerts

PROG = "trainjob-status-server"
QUIET = ["--port=0", "--metrics-port=0", "--probe-port=0", "--webhook-port=0"]


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainjob_status_server.cli", "serve", *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", **(env or {})},
        timeout=60,
    )


def refused(done: subprocess.CompletedProcess[str]) -> str:
    """The one line ``serve`` printed before exiting 2."""
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    """A file the preflight accepts (the tests here never get as far as reading it)."""
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\n")
    return path


def test_a_missing_tls_file(certs: ServingCerts, kubeconfig: Path, tmp_path: Path) -> None:
    missing = tmp_path / "absent.key"
    line = refused(
        serve(
            f"--tls-cert-file={certs.cert_file}",
            f"--tls-key-file={missing}",
            f"--kubeconfig={kubeconfig}",
            *QUIET,
        )
    )
    assert line == f"{PROG} serve: --tls-key-file {missing}: no such file"


def test_a_pair_that_does_not_load(certs: ServingCerts, kubeconfig: Path) -> None:
    line = refused(
        serve(
            f"--tls-cert-file={certs.key_file}",  # the key where the certificate goes
            f"--tls-key-file={certs.key_file}",
            f"--kubeconfig={kubeconfig}",
            *QUIET,
        )
    )
    assert line.startswith(
        f"{PROG} serve: --tls-cert-file {certs.key_file} and --tls-key-file {certs.key_file} "
        "do not load as a certificate and its key: "
    )


def test_no_kubeconfig_outside_a_cluster(certs: ServingCerts) -> None:
    line = refused(
        serve(f"--tls-cert-file={certs.cert_file}", f"--tls-key-file={certs.key_file}", *QUIET)
    )
    assert line == (
        f"{PROG} serve: not running in a cluster (KUBERNETES_SERVICE_HOST is unset) and no "
        "~/.kube/config: give --kubeconfig (or TRAINJOB_STATUS_KUBECONFIG, or set KUBECONFIG)"
    )


def test_a_kubeconfig_that_is_not_there(certs: ServingCerts, tmp_path: Path) -> None:
    absent = tmp_path / "nope.kubeconfig"
    line = refused(
        serve(
            f"--tls-cert-file={certs.cert_file}",
            f"--tls-key-file={certs.key_file}",
            *QUIET,
            env={"TRAINJOB_STATUS_KUBECONFIG": str(absent)},
        )
    )
    assert line == f"{PROG} serve: --kubeconfig {absent}: no such file"


def test_a_kubeconfig_variable_naming_no_file(certs: ServingCerts, tmp_path: Path) -> None:
    absent = tmp_path / "nope.kubeconfig"
    line = refused(
        serve(
            f"--tls-cert-file={certs.cert_file}",
            f"--tls-key-file={certs.key_file}",
            *QUIET,
            env={"KUBECONFIG": f"{absent}:{tmp_path / 'other'}"},
        )
    )
    assert line == f"{PROG} serve: KUBECONFIG {absent}:{tmp_path / 'other'}: no such file"


def test_serve_reads_the_kubeconfig_variable(certs: ServingCerts, tmp_path: Path) -> None:
    """What kubectl reads, serve reads: the file KUBECONFIG names is loaded (and this one
    does not load, which the refusal names)."""
    broken = tmp_path / "broken.kubeconfig"
    broken.write_text("clusters: [\n")
    line = refused(
        serve(
            f"--tls-cert-file={certs.cert_file}",
            f"--tls-key-file={certs.key_file}",
            *QUIET,
            env={"KUBECONFIG": str(broken)},
        )
    )
    assert line.startswith(f"{PROG} serve: cannot load Kubernetes configuration ({broken}): ")


def test_kubeconfig_comes_from_the_flag_then_kubeconfig_then_the_cluster_then_home(
    tmp_path: Path,
) -> None:
    flag, variable = tmp_path / "flag.kubeconfig", tmp_path / "variable.kubeconfig"
    parse = build_parser().parse_args
    given = from_args(parse(["serve", f"--kubeconfig={flag}"]), {})
    env_fallback = from_args(parse(["serve"]), {"TRAINJOB_STATUS_KUBECONFIG": str(flag)})
    bare = from_args(parse(["serve"]), {})
    environ = {"KUBECONFIG": str(variable)}
    assert with_kubeconfig_from_environment(given, environ).kubeconfig == flag
    assert with_kubeconfig_from_environment(env_fallback, environ).kubeconfig == flag
    assert with_kubeconfig_from_environment(bare, environ).kubeconfig == variable
    assert with_kubeconfig_from_environment(bare, {"KUBECONFIG": ""}).kubeconfig is None
    assert with_kubeconfig_from_environment(bare, {}).kubeconfig is None
    # Then, outside a pod, ~/.kube/config where it exists.
    home = tmp_path / "home"
    assert with_kubeconfig_from_environment(bare, {"HOME": str(home)}).kubeconfig is None
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("apiVersion: v1\n")
    at_home = {"HOME": str(home)}
    assert with_kubeconfig_from_environment(bare, at_home).kubeconfig == home / ".kube/config"
    assert with_kubeconfig_from_environment(bare, {**environ, **at_home}).kubeconfig == variable
    in_a_pod = {**at_home, "KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert with_kubeconfig_from_environment(bare, in_a_pod).kubeconfig is None


def test_a_kubeconfig_that_does_not_load(certs: ServingCerts, tmp_path: Path) -> None:
    broken = tmp_path / "broken.kubeconfig"
    broken.write_text("clusters: [\n")
    line = refused(
        serve(
            f"--tls-cert-file={certs.cert_file}",
            f"--tls-key-file={certs.key_file}",
            f"--kubeconfig={broken}",
            *QUIET,
        )
    )
    assert line.startswith(f"{PROG} serve: cannot load Kubernetes configuration ({broken}): ")


def test_outside_a_cluster_serve_reads_the_home_kubeconfig(
    certs: ServingCerts, tmp_path: Path
) -> None:
    """With no flag and no KUBECONFIG, ~/.kube/config is what serve loads (this one is
    broken, so the refusal names it)."""
    config_file = tmp_path / ".kube" / "config"
    config_file.parent.mkdir()
    config_file.write_text("clusters: [\n")
    line = refused(
        serve(
            f"--tls-cert-file={certs.cert_file}",
            f"--tls-key-file={certs.key_file}",
            *QUIET,
            env={"HOME": str(tmp_path)},
        )
    )
    assert line.startswith(f"{PROG} serve: cannot load Kubernetes configuration ({config_file}): ")


@pytest.mark.parametrize(
    ("args", "env", "wanted"),
    [
        (
            ["--port=abc"],
            {},
            f"{PROG} serve: argument --port: invalid int value: 'abc' (--help lists the options)",
        ),
        (
            ["--log-level=loud"],
            {},
            f"{PROG} serve: argument --log-level: invalid choice: 'loud'",
        ),
        (
            ["--no-such-flag"],
            {},
            f"{PROG}: unrecognized arguments: --no-such-flag (--help lists the options)",
        ),
        (
            [],
            {"TRAINJOB_STATUS_PORT": "ten"},
            f"{PROG} serve: TRAINJOB_STATUS_PORT='ten': ",
        ),
    ],
    ids=["flag-type", "flag-choice", "unknown-flag", "env-type"],
)
def test_a_bad_flag_value(args: list[str], env: dict[str, str], wanted: str) -> None:
    assert refused(serve("--insecure-http", *args, env=env)).startswith(wanted)


def test_the_bootstrap_needs_no_tls_files_yet(tmp_path: Path) -> None:
    """The pair does not exist until --cert-bootstrap writes it; in a pod the in-cluster
    configuration is there."""
    args = build_parser().parse_args(
        [
            "serve",
            f"--tls-cert-file={tmp_path / 'tls.crt'}",
            f"--tls-key-file={tmp_path / 'tls.key'}",
            "--cert-bootstrap",
        ]
    )
    settings = from_args(args, environ={})
    assert startup_problems(settings, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == []
    assert len(startup_problems(settings, {})) == 1
