"""The server's configuration: one frozen Config, built from flags with env fallbacks."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .auth.settings import AuthSettings
from .pods.injection import DEFAULT_SELECTOR, Selector

ENV_PREFIX = "TRAINJOB_STATUS_"

# Kubeflow Trainer's limit; a typical post is well under 20 KiB even with 256 metrics.
MAX_BODY_BYTES = 65_536

MIN_HEADER_BYTES = 2048


@dataclass(frozen=True)
class Config:
    host: str = "0.0.0.0"  # noqa: S104 - a server in a pod listens on all interfaces
    port: int = 10443
    metrics_port: int = 9090
    probe_port: int = 8081
    webhook_port: int = 9443
    # The aggregated API (trainjobprogresses); None: not served.
    progress_api_port: int | None = None
    metrics_secure: bool = False
    metrics_auth_cache_ttl: float = 60.0
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    tls_min_version: str = "1.2"
    tls_reload_interval: float = 10.0
    insecure_http: bool = False
    kubeconfig: Path | None = None
    issuer: str | None = None
    kube_api_qps: float = 5.0
    kube_api_burst: int = 10
    kube_api_timeout: float = 5.0
    kube_auth_qps: float = 2.0
    kube_auth_burst: int = 5
    kube_watch_qps: float = 2.0
    kube_watch_burst: int = 10
    kube_metrics_qps: float = 1.0
    kube_metrics_burst: int = 4
    kube_reads_qps: float = 5.0
    kube_reads_burst: int = 10
    read_timeout: float = 10.0
    first_request_timeout: float = 5.0
    idle_timeout: float = 120.0
    max_connections: int = 1024
    max_connections_per_ip: int = 256
    max_header_bytes: int = 8192
    write_timeout: float = 10.0
    shutdown_timeout: float = 5.0
    shutdown_delay: float = 3.0
    write_mode: str = "coalesce"
    min_write_interval: float = 1.0
    drain_timeout: float = 10.0
    drain_kube_api_qps: float = 50.0
    # Unset: the budget advice says when demand exceeds the budget, without a QPS.
    target_freshness: float | None = None
    max_exported_series: int = 100_000
    max_metric_names_per_trainjob: int = 512
    log_level: str = "info"
    log_format: str = "json"
    token_leeway: float = 60.0
    jwks_refresh_interval: float = 30.0
    require_pod_membership: bool = True
    allow_unbound_tokens: bool = False
    token_review: bool = False
    sa_rate_limit: float = 500.0
    sa_rate_burst: int = 2000
    token_cache_size: int = 10_000
    # Pod injector, CA distribution, certificate bootstrap.
    inject_pods: bool = True
    inject_selector: str = DEFAULT_SELECTOR
    inject_timeout: float = 2.0
    override_existing: bool = False
    service_name: str = "trainjob-status"
    service_namespace: str = "trainjob-status"
    service_port: int = 10443
    distribute_ca: bool = False
    ca_configmap: str = "trainjob-status-ca"
    ca_file: Path | None = None
    cert_bootstrap: bool = False
    cert_secret: str = "trainjob-status-tls"
    webhook_configuration: str = "trainjob-status"
    cert_check_interval: float = 300.0
    # Hand-over at shutdown: what the drain cannot write goes to a replica that stays.
    pod_ip: str | None = None
    service_account: str = "trainjob-status"
    peer_token_file: Path | None = Path("/var/run/secrets/trainjob-status/peer/token")
    # Start with an aiohttp outside the tested range (versions.AIOHTTP_RANGE).
    allow_untested_aiohttp: bool = False

    @property
    def ca_path(self) -> Path | None:
        """The CA bundle to distribute: --ca-file, else ca.crt beside the certificate
        (where the bootstrap writes it and cert-manager's Secret mounts it)."""
        if self.ca_file is not None:
            return self.ca_file
        return None if self.tls_cert_file is None else self.tls_cert_file.with_name("ca.crt")

    def auth_settings(self) -> AuthSettings:
        return AuthSettings(
            issuer=self.issuer,
            leeway=self.token_leeway,
            jwks_refresh_interval=self.jwks_refresh_interval,
            require_pod_membership=self.require_pod_membership,
            allow_unbound_tokens=self.allow_unbound_tokens,
            token_review=self.token_review,
            sa_rate_limit=self.sa_rate_limit,
            sa_rate_burst=self.sa_rate_burst,
            token_cache_size=self.token_cache_size,
        )

    def check(self) -> list[str]:
        """What is wrong with this configuration, one line each (empty when usable)."""
        problems = []
        if not self.insecure_http and (self.tls_cert_file is None or self.tls_key_file is None):
            problems.append(
                "--tls-cert-file and --tls-key-file are required (or --insecure-http for local use)"
            )
        if self.insecure_http and (self.tls_cert_file or self.tls_key_file):
            problems.append("--insecure-http cannot be combined with TLS files")
        for name in ("port", "metrics_port", "probe_port", "webhook_port"):
            value = getattr(self, name)
            if not 0 <= value <= 65535:
                problems.append(f"--{name.replace('_', '-')} must be 0..65535, got {value}")
        if self.progress_api_port is not None:
            if not 0 <= self.progress_api_port <= 65535:
                problems.append(
                    f"--progress-api-port must be 0..65535, got {self.progress_api_port}"
                )
            elif self.progress_api_port != 0 and self.progress_api_port in (
                self.port,
                self.metrics_port,
                self.probe_port,
                self.webhook_port,
            ):
                problems.append("--progress-api-port must differ from the other ports")
            if self.insecure_http:
                problems.append(
                    "--progress-api-port needs the serving certificate: not --insecure-http"
                )
        if self.port == self.metrics_port and self.port != 0:
            problems.append("--port and --metrics-port must differ")
        if self.probe_port != 0 and self.probe_port in (self.port, self.metrics_port):
            problems.append("--probe-port must differ from --port and --metrics-port")
        if self.webhook_port != 0 and self.webhook_port in (
            self.port,
            self.metrics_port,
            self.probe_port,
        ):
            problems.append(
                "--webhook-port must differ from --port, --metrics-port and --probe-port"
            )
        if self.metrics_secure and self.insecure_http:
            problems.append("--metrics-secure needs the serving certificate: not --insecure-http")
        if self.metrics_auth_cache_ttl < 0:
            problems.append("--metrics-auth-cache-ttl must be >= 0")
        for budget in ("api", "auth", "watch", "metrics", "reads"):
            qps, burst = getattr(self, f"kube_{budget}_qps"), getattr(self, f"kube_{budget}_burst")
            if qps <= 0 or burst < 1:
                problems.append(f"--kube-{budget}-qps must be > 0 and --kube-{budget}-burst >= 1")
        if self.shutdown_delay < 0:
            problems.append("--shutdown-delay must be >= 0")
        if self.drain_kube_api_qps <= 0:
            problems.append("--drain-kube-api-qps must be > 0")
        if self.min_write_interval < 0 or self.drain_timeout < 0:
            problems.append("--min-write-interval and --drain-timeout must be >= 0")
        if self.target_freshness is not None and self.target_freshness <= 0:
            problems.append("--target-freshness must be > 0")
        for name in (
            "kube_api_timeout",
            "read_timeout",
            "first_request_timeout",
            "idle_timeout",
            "write_timeout",
            "shutdown_timeout",
        ):
            if getattr(self, name) <= 0:
                problems.append(f"--{name.replace('_', '-')} must be > 0")
        if self.max_exported_series < 0:
            problems.append("--max-exported-series must be >= 0 (0: no cap)")
        if self.max_metric_names_per_trainjob < 0:
            problems.append("--max-metric-names-per-trainjob must be >= 0 (0: no limit)")
        if self.max_connections < 1 or self.max_connections_per_ip < 1:
            problems.append("--max-connections and --max-connections-per-ip must be >= 1")
        if self.max_header_bytes < MIN_HEADER_BYTES:
            problems.append(
                f"--max-header-bytes must be >= {MIN_HEADER_BYTES} (a post with its token "
                "needs about 2 KiB)"
            )
        problems += self._deploy_problems()
        return problems + self.auth_settings().check()

    def _deploy_problems(self) -> list[str]:
        problems = []
        try:
            Selector.parse(self.inject_selector)
        except ValueError as exc:
            problems.append(f"--inject-selector: {exc}")
        if not 1 <= self.service_port <= 65535:
            problems.append(f"--service-port must be 1..65535, got {self.service_port}")
        for name in ("inject_timeout", "cert_check_interval"):
            if getattr(self, name) <= 0:
                problems.append(f"--{name.replace('_', '-')} must be > 0")
        if self.cert_bootstrap and (
            self.insecure_http or self.tls_cert_file is None or self.tls_key_file is None
        ):
            problems.append(
                "--cert-bootstrap writes the files --tls-cert-file and --tls-key-file name: "
                "give both (and no --insecure-http)"
            )
        if self.distribute_ca and self.ca_path is None:
            problems.append("--distribute-ca needs --ca-file or --tls-cert-file (ca.crt beside it)")
        return problems


@dataclass(frozen=True)
class _Flag:
    name: str
    parse: Callable[[str], Any]
    help: str
    choices: tuple[str, ...] | None = None


def _path(text: str) -> Path:
    return Path(text)


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


_FLAGS = (
    _Flag("host", str, "address to listen on"),
    _Flag("port", int, "HTTPS port of the status endpoint (Kubeflow Trainer's port)"),
    _Flag(
        "metrics_port",
        int,
        "port for /metrics, /healthz and /readyz: plain HTTP, or HTTPS with --metrics-secure",
    ),
    _Flag(
        "metrics_auth_cache_ttl",
        float,
        "with --metrics-secure, seconds a scraper token's TokenReview and SubjectAccessReview"
        " verdict is reused (0: ask for every request)",
    ),
    _Flag(
        "probe_port",
        int,
        "plain-HTTP port for /healthz and /readyz only, with slots of its own: probes answer"
        " while the metrics port is full",
    ),
    _Flag(
        "webhook_port",
        int,
        "HTTPS port of the pod injector webhook (/mutate-pods) alone, with connection slots"
        " of its own (as many as --max-connections and --max-connections-per-ip allow"
        " again): a crowd on the status port cannot hold back admissions, nor the reverse."
        " --port answers /mutate-pods too, for a webhook configuration that still names it",
    ),
    _Flag(
        "progress_api_port",
        int,
        "HTTPS port of the aggregated API trainjob-status.kubeflow.org/v1alpha1"
        " (trainjobprogresses: each TrainJob's newest update, read through the Kubernetes"
        " API server, which its APIService sends here); only the API server's front proxy"
        " is answered (kube-system/extension-apiserver-authentication says who that is)."
        " Unset: not served",
    ),
    _Flag("tls_cert_file", _path, "serving certificate (PEM); reloaded when it changes"),
    _Flag("tls_key_file", _path, "serving private key (PEM); reloaded when it changes"),
    _Flag("tls_min_version", str, "lowest TLS version accepted", ("1.2", "1.3")),
    _Flag("tls_reload_interval", float, "seconds between checks of the TLS files"),
    _Flag(
        "kubeconfig",
        _path,
        "kubeconfig file; when absent $KUBECONFIG (as kubectl reads it), else the in-cluster"
        " configuration inside a pod, else ~/.kube/config",
    ),
    _Flag("issuer", str, "service-account token issuer; discovered when absent"),
    _Flag(
        "kube_api_qps",
        float,
        "Kubernetes API requests per second for status writes and the TrainJob look-ups of "
        "authenticated posts",
    ),
    _Flag("kube_api_burst", int, "burst of the status-write API budget"),
    _Flag(
        "kube_api_timeout",
        float,
        "seconds before a Kubernetes API call is abandoned; a post's call that would wait "
        "longer than this for its API budget is refused at once (503 + Retry-After)",
    ),
    _Flag(
        "kube_auth_qps",
        float,
        "Kubernetes API requests per second for the posts' token checks (TokenReview, JWKS,"
        " pod look-ups)",
    ),
    _Flag("kube_auth_burst", int, "burst of the token-check API budget"),
    _Flag(
        "kube_watch_qps",
        float,
        "Kubernetes API requests per second for cache lists and watches, certificates and "
        "CA distribution",
    ),
    _Flag("kube_watch_burst", int, "burst of the list/watch API budget"),
    _Flag(
        "kube_metrics_qps",
        float,
        "Kubernetes API requests per second for the metrics port's TokenReviews and"
        " SubjectAccessReviews (--metrics-secure): a budget of their own, so scrapers, or"
        " strangers with garbage tokens, cannot delay the posts' token checks",
    ),
    _Flag("kube_metrics_burst", int, "burst of the metrics-review API budget"),
    _Flag(
        "kube_reads_qps",
        float,
        "Kubernetes API requests per second for the aggregated API's SubjectAccessReviews"
        " (--progress-api-port): one per reader, namespace and verb every 10 s",
    ),
    _Flag("kube_reads_burst", int, "burst of the aggregated API's review budget"),
    _Flag(
        "read_timeout",
        float,
        "seconds to receive a request body, and each later request's headers from their"
        " first byte (closed otherwise)",
    ),
    _Flag(
        "first_request_timeout",
        float,
        "seconds a new connection has for its TLS handshake, then as long for its first"
        " request's headers (closed otherwise); until they are in, it may be closed when a"
        " newcomer finds no free slot",
    ),
    _Flag("idle_timeout", float, "seconds an idle keep-alive connection stays open"),
    _Flag(
        "max_connections",
        int,
        "open client connections at most; when all are taken, one that does not move (idle,"
        " not reading its answer, a second waiting for its body, or silent since it opened)"
        " of the address holding the most is closed to make room; a new one is closed on"
        " arrival if none is",
    ),
    _Flag(
        "max_connections_per_ip",
        int,
        "open connections from one source address at most (same rule as --max-connections,"
        " within that address);"
        " refusals are counted in trainjob_status_connections_refused_total",
    ),
    _Flag(
        "max_header_bytes",
        int,
        "bytes of one request's line and headers at most, on every request of a connection;"
        " over it: 431 and the connection closes",
    ),
    _Flag(
        "write_timeout",
        float,
        "seconds a connection's answers may wait unsent (the client not reading); then it closes",
    ),
    _Flag(
        "shutdown_delay",
        float,
        "seconds the status port keeps accepting after SIGTERM (readiness already false)"
        " while the Service's endpoints catch up: posts are answered 503 with Retry-After"
        " and the client retries them on another replica; 0: stop accepting at once",
    ),
    _Flag(
        "shutdown_timeout",
        float,
        "seconds in-flight requests get to finish once the status port stops accepting",
    ),
    _Flag(
        "write_mode",
        str,
        "coalesce: one pending update per TrainJob, written within the API budget; direct: "
        "one write per post, answered with its outcome (Kubeflow Trainer's way)",
        ("coalesce", "direct"),
    ),
    _Flag("min_write_interval", float, "seconds between two status writes of one TrainJob"),
    _Flag(
        "drain_timeout",
        float,
        "seconds pending updates get to be written on SIGTERM (from the signal, beside the"
        " in-flight requests); what is left then is logged per TrainJob and counted in"
        ' trainjob_status_updates_dropped_total{reason="shutdown"}',
    ),
    _Flag(
        "drain_kube_api_qps",
        float,
        "status writes per second at most while draining on SIGTERM (--kube-api-qps when"
        " higher): a rolling update writes what each replica holds within --drain-timeout"
        " instead of at the steady budget; the burst is as many",
    ),
    _Flag(
        "target_freshness",
        float,
        "seconds from post to visible status you want; when a minute's write demand exceeds"
        " --kube-api-qps the server logs (once) and exports the --kube-api-qps that would"
        " meet it (trainjob_status_advised_kube_api_qps); unset: no QPS advised",
    ),
    _Flag(
        "max_exported_series",
        int,
        "per-TrainJob series one scrape exports at most (0: no cap); trainjob_metric series "
        "are dropped first, counted in trainjob_status_exported_series_dropped_total",
    ),
    _Flag(
        "max_metric_names_per_trainjob",
        int,
        "distinct trainjob_metric names one TrainJob exports over its life (0: no limit); "
        "later new names are not exported, counted in "
        'trainjob_status_metric_names_refused_total{reason="limit"}',
    ),
    _Flag("log_level", str, "log level", ("debug", "info", "warning", "error")),
    _Flag("log_format", str, "log line format", ("json", "text")),
    _Flag("token_leeway", float, "seconds of clock skew allowed on token exp/nbf/iat"),
    _Flag(
        "jwks_refresh_interval",
        float,
        "seconds between JWKS refreshes; a token with an unknown kid refreshes at most this often",
    ),
    _Flag("sa_rate_limit", float, "posts per second per service account (429 beyond)"),
    _Flag("sa_rate_burst", int, "posts one service account may make at once"),
    _Flag("token_cache_size", int, "verified tokens kept in memory (0: verify every post)"),
    _Flag(
        "inject_selector",
        str,
        "label selector of the TrainJob pods to inject, matched against the pod's labels and "
        "those of the JobSet replicated job that made it",
    ),
    _Flag("inject_timeout", float, "seconds a pod admission may take; then the pod goes unchanged"),
    _Flag("service_name", str, "the Service in front of the server (injected URLs, certificate)"),
    _Flag("service_namespace", str, "the server's namespace (its Service, certificate Secret)"),
    _Flag("service_port", int, "the Service's HTTPS port, as injected URLs name it"),
    _Flag("ca_configmap", str, "ConfigMap (key ca.crt) injected pods read the server's CA from"),
    _Flag(
        "ca_file",
        _path,
        "CA bundle distributed to TrainJob namespaces; ca.crt beside --tls-cert-file when absent",
    ),
    _Flag("cert_secret", str, "Secret the certificate bootstrap keeps the CA and serving pair in"),
    _Flag(
        "webhook_configuration",
        str,
        "MutatingWebhookConfiguration whose caBundle the bootstrap keeps current ('' for none)",
    ),
    _Flag("cert_check_interval", float, "seconds between certificate checks (renewal, caBundle)"),
    _Flag(
        "pod_ip",
        str,
        "this replica's Pod IP (the Downward API's status.podIP): tells its own endpoint"
        " from the other replicas' in the Service's EndpointSlices",
    ),
    _Flag(
        "service_account",
        str,
        "the server's ServiceAccount (in --service-namespace): a replica takes handed-over"
        " updates only from a token of this account",
    ),
    _Flag(
        "peer_token_file",
        _path,
        "a projected token of --service-account for the audience"
        " trainjob-status.kubeflow.org/peers: what this replica proves itself with when it"
        " gives updates to another replica (the one that owns their TrainJob, or at"
        " shutdown one that stays); no such file: it writes every update it takes, and"
        " hands nothing over",
    ),
)

# Switches: --name turns on, --no-name off; the environment takes true/false.
_SWITCHES = (
    ("insecure_http", "serve plain HTTP instead of HTTPS: local use only, tokens travel in clear"),
    (
        "metrics_secure",
        "serve the metrics port over HTTPS with the serving certificate; every request needs a"
        " bearer token that TokenReview accepts and RBAC lets get the non-resource URL it asks"
        " for (/metrics)",
    ),
    (
        "require_pod_membership",
        "the token's pod must carry jobset.sigs.k8s.io/jobset-name=<trainjob> and, where Jobs"
        " and JobSets can be listed, be owned by a Job of the TrainJob's JobSet (by uid); off,"
        " neither, and every pod in the cluster is cached",
    ),
    (
        "allow_unbound_tokens",
        "accept tokens not bound to a pod (any pod of the namespace could post)",
    ),
    ("token_review", "verify tokens with TokenReview instead of the issuer's JWKS"),
    ("inject_pods", "serve the pod injector webhook at /mutate-pods on the serving port"),
    (
        "override_existing",
        "inject pods that already carry KUBEFLOW_TRAINER_SERVER_* (the Trainer's own feature), "
        "replacing those values",
    ),
    ("distribute_ca", "keep the CA ConfigMap in every namespace that has TrainJobs"),
    (
        "cert_bootstrap",
        "create and renew the CA and serving certificate in --cert-secret and write them to "
        "--tls-cert-file and --tls-key-file (no cert-manager needed)",
    ),
    (
        "allow_untested_aiohttp",
        "start even when the installed aiohttp is outside the range this release is tested"
        " with (the server relies on aiohttp internals; a warning is logged)",
    ),
)


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Every Config field as ``--flag`` with its ``TRAINJOB_STATUS_*`` fallback."""
    defaults = Config()
    for flag in _FLAGS:
        default = getattr(defaults, flag.name)
        shown = "none" if default is None else default
        parser.add_argument(
            "--" + flag.name.replace("_", "-"),
            dest=flag.name,
            type=flag.parse,
            choices=flag.choices,
            default=None,
            help=f"{flag.help} (env {env_name(flag.name)}; default {shown})",
        )
    for name, text in _SWITCHES:
        shown = "on" if getattr(defaults, name) else "off"
        parser.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"{text} (env {env_name(name)}; default {shown})",
        )


def from_args(args: argparse.Namespace, environ: dict[str, str] | None = None) -> Config:
    """Flags win over environment variables, which win over defaults.

    ValueError names the environment variable whose value does not parse."""
    env = dict(os.environ) if environ is None else environ
    parsers = {f.name: f.parse for f in _FLAGS} | {name: _bool for name, _ in _SWITCHES}
    choices = {f.name: f.choices for f in _FLAGS}
    values: dict[str, Any] = {}
    for field in fields(Config):
        given = getattr(args, field.name, None)
        if given is not None:
            values[field.name] = given
            continue
        raw = env.get(env_name(field.name))
        if raw is None or field.name not in parsers:
            continue
        try:
            value = parsers[field.name](raw)
        except ValueError as exc:
            raise ValueError(f"{env_name(field.name)}={raw!r}: {exc}") from exc
        allowed = choices.get(field.name)
        if allowed and value not in allowed:
            raise ValueError(f"{env_name(field.name)}={raw!r}: must be one of {allowed}")
        values[field.name] = value
    return Config(**values)
