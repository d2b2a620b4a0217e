"""The composition root: a Config (and an authenticator) -> running components.

Start order: Kubernetes client, TrainJob cache, TLS watcher, the serving listener, the
metrics and probe listeners. Stop order (SIGTERM): readiness goes false and the writer
takes no new update (posts: 503, retried elsewhere); beside each other, the serving
listener keeps accepting for ``shutdown_delay`` (the Service's endpoints catch up), then
stops and in-flight requests finish (up to ``shutdown_timeout``), and the writer drains
what it accepted (up to ``drain_timeout``); then the rest closes (the metrics port after
the drain, so its counts can still be scraped).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from .auth import Authenticator, TokenAuthenticator
from .auth.peers import PeerGate
from .auth.ratelimit import SourceLimiter
from .budgets import Budgets
from .certificates import certs
from .certificates.certs import (
    APIServiceCABundle,
    CertBootstrap,
    CertSettings,
    WebhookCABundle,
)
from .certificates.tls import ReloadingTLS
from .config import Config
from .http import probes
from .http.endpoint import StatusEndpoint
from .http.handover import HANDOVER_PATH, NEWEST_PATH, HandOverEndpoint, NewestEndpoint
from .http.listener import CappedSite, Limits
from .http.metricsauth import REVIEWS_PER_SOURCE as METRICS_REVIEWS_PER_SOURCE
from .http.metricsauth import MetricsGuard, VerdictCache
from .http.progressapi import ProgressAPI
from .http.request_handling import no_server_header
from .http.responses import Answer
from .http.serving import Handler, ServingHandler
from .http.webhook import INJECT_PATH, InjectorSettings, JobSetSteps, PodInjector
from .kube.cache import WatchCache
from .kube.client import KubeClient
from .kube.ratelimit import TokenBucket
from .kube.resources import TRAINJOBS
from .kube.views import trainjob_view
from .metrics.exporter import Exporter
from .peers.forwarding import Forwarder
from .peers.replicas import Replicas
from .peers.ring import Peer
from .pods.cadistribution import CADistribution
from .pods.injection import Selector, Target
from .progress.resource import APISERVICE
from .status.coalescing import writes_in_flight
from .status.lookup import CachedTrainJobs
from .status.writer import CoalescingWriter, DirectWriter

log = logging.getLogger(__name__)

LINGER_SECONDS = 2.0
"""After a 408 or 413 (the connection is closed, its body unread), how long the rest of
the body is read and dropped before closing, so the client can still read the answer
rather than have it lost to a reset: aiohttp's default is 10 s, for which a stalled
client would keep its connection slot after its 408."""

# aiohttp's protocol settings every port shares: no access log (ours is request_handling.py's).
QUIET: Mapping[str, Any] = {"access_log": None}

METRICS_CONNECTIONS = 64
"""Open connections to the metrics port: scrapers keep one each."""

METRICS_CONNECTIONS_PER_IP = 16

PROGRESS_API_CONNECTIONS = (128, 64)
"""Open connections to the aggregated API port, in all and from one address: the API
servers' proxies keep a pool each (only they finish a handshake: a client certificate
of their CA is required)."""

TRAINJOB_ABSENT_SECONDS = 10.0
"""How long a TrainJob the API server said does not exist is taken as missing without
asking again (unless the watch shows it sooner): authenticated posts for a deleted or
never-created TrainJob cost one GET per period, not one each. Pod admissions never ask."""


class StatusServer:
    """The whole server for one Config; ``async with`` runs it."""

    def __init__(self, config: Config, authenticator: Authenticator) -> None:
        self.config = config
        self.budgets = Budgets.for_config(config)
        # Lists, watches, certificates and CA distribution; owns the connection.
        self.kube = self.budgets.watch
        self.trainjobs = WatchCache(
            self.kube,
            TRAINJOBS,
            transform=trainjob_view,
            absent_seconds=TRAINJOB_ABSENT_SECONDS,
            fetch_client=self.budgets.writes,
        )
        # Gauges per TrainJob from this cache, the self-metrics, process metrics.
        self.exporter = Exporter(
            self.trainjobs,
            max_series=config.max_exported_series,
            max_names=config.max_metric_names_per_trainjob,
        )
        # The token authenticator has I/O (keys, pods) and a lifecycle; others have none.
        self.token_auth = authenticator if isinstance(authenticator, TokenAuthenticator) else None
        # With the bootstrap, the files exist only once it has run: built in start().
        self.tls: ReloadingTLS | None = None if config.cert_bootstrap else _serving_tls(config)
        self.certs = _cert_bootstrap(config, self.kube)
        injector_settings = _injector_settings(config)
        self.jobset_steps = (
            JobSetSteps(self.kube, injector_settings.selector) if config.inject_pods else None
        )
        self.injector = (
            PodInjector(injector_settings, self.trainjobs, self.jobset_steps)
            if config.inject_pods
            else None
        )
        self.ca_distribution = (
            CADistribution(
                self.kube,
                self.trainjobs,
                config.ca_path,
                name=config.ca_configmap,
                poll_interval=config.tls_reload_interval,
            )
            if config.distribute_ca and config.ca_path is not None
            else None
        )
        # The other replicas: the owners of TrainJobs this one does not write, and those
        # that take what it could not write when it stops (coalescing only: a direct
        # write is done before its post is answered).
        self.replicas = (
            Replicas(
                self.kube,
                namespace=config.service_namespace,
                service=config.service_name,
                own=None if config.pod_ip is None else Peer(config.pod_ip, config.port),
                token_file=config.peer_token_file,
                ca_file=config.ca_path,
            )
            if config.write_mode != "direct"
            else None
        )
        self.writer: CoalescingWriter | DirectWriter = (
            DirectWriter(self.budgets.writes)
            if config.write_mode == "direct"
            else CoalescingWriter(
                # Not a request: its writes wait their turn instead of being refused.
                self.budgets.writes.waiting(None),
                self.trainjobs,
                min_interval=config.min_write_interval,
                concurrency=writes_in_flight(config.kube_api_burst),
                target_freshness=config.target_freshness,
                drain_qps=config.drain_kube_api_qps,
                successors=self.replicas,
                touched=self.exporter.touch,
            )
        )
        if isinstance(self.writer, CoalescingWriter):
            # Gauges from ingest: what was accepted, before its write lands; with several
            # replicas, each exports the TrainJobs it owns.
            self.exporter.fresh = self.writer
            self.exporter.ownership = self.replicas
        # Updates a stopping replica hands over, checked as its token says (posts' tokens'
        # checks: only with token authentication).
        self.takeover = (
            HandOverEndpoint(
                PeerGate(self.token_auth, config.service_namespace, config.service_account),
                self.writer,
                config.read_timeout,
            )
            if isinstance(self.writer, CoalescingWriter) and self.token_auth is not None
            else None
        )
        # What this replica holds, for another one's aggregated API reads.
        self.newest = (
            NewestEndpoint(self.takeover.peers, self.writer)
            if isinstance(self.writer, CoalescingWriter) and self.takeover is not None
            else None
        )
        # Each TrainJob written by one replica: what another owns is given to it.
        self.forwarder = (
            Forwarder(self.writer, self.replicas)
            if isinstance(self.writer, CoalescingWriter) and self.replicas is not None
            else None
        )
        self.endpoint = StatusEndpoint(
            authenticator=authenticator,
            trainjobs=CachedTrainJobs(self.trainjobs),
            writer=self.writer if self.forwarder is None else self.forwarder,
            read_timeout=config.read_timeout,
        )
        # Scrapers' tokens are checked with a budget of their own.
        self.metrics_guard = (
            MetricsGuard(
                self.budgets.metrics,
                VerdictCache(config.metrics_auth_cache_ttl),
                SourceLimiter(*METRICS_REVIEWS_PER_SOURCE),
                # A quarter of the budget: tokens renewing an approval keep the rest.
                TokenBucket(config.kube_metrics_qps / 4, max(1, config.kube_metrics_burst // 2)),
            )
            if config.metrics_secure
            else None
        )
        # The aggregated API: built in start(), once the serving certificate exists.
        self.progress_api: ProgressAPI | None = None
        self._progress: web.AppRunner | None = None
        self._progress_site: CappedSite | None = None
        self.shutting_down = False
        self._serving: web.ServerRunner | None = None
        self._webhook: web.ServerRunner | None = None
        self._metrics: web.AppRunner | None = None
        self._probes: web.AppRunner | None = None
        self._site: CappedSite | None = None
        self._webhook_site: CappedSite | None = None
        self._metrics_site: CappedSite | None = None
        self._probe_site: CappedSite | None = None

    # -- what the handlers ask -------------------------------------------------------

    @property
    def ready(self) -> bool:
        return not self.shutting_down and self._site is not None and self.trainjobs.synced.is_set()

    async def _healthz(self, _request: web.BaseRequest) -> web.Response:
        return Answer(text="ok")

    async def _readyz(self, _request: web.BaseRequest) -> web.Response:
        if self.ready:
            return Answer(text="ok")
        return Answer(status=503, text="not ready")

    # -- apps ------------------------------------------------------------------------

    def serving_handler(self) -> ServingHandler:
        """The serving port's routes. Its answers are responses.Answer: no Server header."""
        posts = {} if self.injector is None else {INJECT_PATH: self.injector.handle}
        gets: dict[str, Handler] = {"/healthz": self._healthz, "/readyz": self._readyz}
        if self.takeover is not None:
            posts[HANDOVER_PATH] = self.takeover.handle
        if self.newest is not None:
            gets[NEWEST_PATH] = self.newest.handle
        return ServingHandler(
            self.endpoint.handle,
            gets=gets,
            posts=posts,
            uncounted=("/healthz", "/readyz", INJECT_PATH, HANDOVER_PATH, NEWEST_PATH),
        )

    def webhook_handler(self) -> ServingHandler:
        """The webhook port's routes: the pod injector and the probes, nothing else."""
        assert self.injector is not None
        return ServingHandler(
            None,
            gets={"/healthz": self._healthz, "/readyz": self._readyz},
            posts={INJECT_PATH: self.injector.handle},
            uncounted=("/healthz", "/readyz", INJECT_PATH),
        )

    def metrics_app(self) -> web.Application:
        guarded = [] if self.metrics_guard is None else [self.metrics_guard.middleware]
        app = web.Application(middlewares=guarded)
        app.on_response_prepare.append(no_server_header)
        app.router.add_get("/metrics", self.exporter.handle)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        return app

    def probe_app(self) -> web.Application:
        """The probes alone, on a port of their own (``http/probes.py``)."""
        return probes.probe_app(self._healthz, self._readyz)

    # -- lifecycle -------------------------------------------------------------------

    def _serving_url(self, site: CappedSite) -> str:
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://{_url_host(self.config.host)}:{site.port}"

    @property
    def url(self) -> str:
        assert self._site is not None
        return self._serving_url(self._site)

    @property
    def metrics_url(self) -> str:
        assert self._metrics_site is not None
        scheme = "https" if self.config.metrics_secure else "http"
        return f"{scheme}://{_url_host(self.config.host)}:{self._metrics_site.port}"

    @property
    def webhook_url(self) -> str | None:
        """The webhook port's URL; None without the pod injector (``--no-inject-pods``)."""
        return None if self._webhook_site is None else self._serving_url(self._webhook_site)

    @property
    def progress_api_url(self) -> str | None:
        """The aggregated API port's URL; None without ``--progress-api-port``."""
        if self._progress_site is None:
            return None
        return self._serving_url(self._progress_site)

    @property
    def probe_url(self) -> str:
        assert self._probe_site is not None
        return f"http://{_url_host(self.config.host)}:{self._probe_site.port}"

    async def _listen(
        self,
        runner: web.BaseRunner,
        port: int,
        tls: ssl.SSLContext | None,
        connections: tuple[int, int],
        listener: str,
        first_request_timeout: float | None = None,
        handler_settings: Mapping[str, Any] = QUIET,
    ) -> CappedSite:
        """Set ``runner`` up and serve it on ``port``; ``connections`` is (open at most,
        from one address at most); ``first_request_timeout`` defaults to the flag's;
        ``handler_settings`` are the keyword arguments ``runner``'s server was made with,
        which each connection's protocol is made with too."""
        config = self.config
        await runner.setup()
        site = CappedSite(
            runner,
            config.host,
            port,
            ssl_context=tls,
            limits=Limits(
                max_connections=connections[0],
                max_connections_per_ip=connections[1],
                first_request_timeout=first_request_timeout or config.first_request_timeout,
                header_timeout=config.read_timeout,
                write_timeout=config.write_timeout,
                max_head_bytes=config.max_header_bytes,
            ),
            handler_settings=handler_settings,
            listener=listener,
        )
        await site.start()
        return site

    async def _serve(
        self, handler: ServingHandler, port: int, listener: str
    ) -> tuple[web.ServerRunner, CappedSite]:
        """``handler`` served on ``port`` as the status port is: the serving certificate,
        its protocol settings and its connection caps (slots of its own, of that size)."""
        config = self.config
        settings: dict[str, Any] = {
            **QUIET,
            "keepalive_timeout": config.idle_timeout,
            "lingering_time": LINGER_SECONDS,
            # Bodies are decoded by the endpoint (http/codings.py): a bad one is a 400.
            "auto_decompress": False,
        }
        runner = web.ServerRunner(
            web.Server(handler, **settings),
            handle_signals=False,
            shutdown_timeout=config.shutdown_timeout,
        )
        site = await self._listen(
            runner,
            port,
            None if self.tls is None else self.tls.context,
            (config.max_connections, config.max_connections_per_ip),
            listener,
            handler_settings=settings,
        )
        return runner, site

    def _metrics_tls(self) -> ssl.SSLContext | None:
        if not self.config.metrics_secure:
            return None
        if self.tls is None:
            raise ValueError("--metrics-secure needs the serving certificate")
        # The serving certificate's context: reloaded with it.
        return self.tls.context

    async def start(self) -> StatusServer:
        config = self.config
        if config.insecure_http:
            log.warning("serving plain HTTP (--insecure-http): tokens travel in clear")
        await self.kube.start()
        if self.certs is not None:
            await self.certs.start()  # returns once the files hold a valid pair
            self.tls = _serving_tls(config)
        await self.trainjobs.start()
        if self.jobset_steps is not None:
            await self.jobset_steps.start()
            self.exporter.add_cache(self.jobset_steps.jobsets)
        if self.ca_distribution is not None:
            await self.ca_distribution.start()
        self.exporter.start()
        if self.replicas is not None:
            await self.replicas.start()
            if self.replicas.watching:
                self.exporter.add_cache(self.replicas.endpoints)
        await self.writer.start()
        if self.forwarder is not None:
            await self.forwarder.start()
        if self.token_auth is not None:
            # Returns at once; `ready` follows.
            # The injector's JobSet cache serves the owner chain too: one JobSet watch.
            jobsets = self.jobset_steps.jobsets if self.jobset_steps is not None else None
            await self.token_auth.start(
                self.budgets.auth, watch=self.kube, trainjobs=self.trainjobs, jobsets=jobsets
            )
            if self.token_auth.binding is not None:
                self.exporter.add_cache(self.token_auth.binding.pods)
        if self.tls is not None:
            await self.tls.start()
        self._serving, self._site = await self._serve(
            self.serving_handler(), config.port, "serving"
        )
        if self.injector is not None:
            # Slots of its own: a crowd on the status port cannot hold admissions back.
            self._webhook, self._webhook_site = await self._serve(
                self.webhook_handler(), config.webhook_port, "webhook"
            )
        self._metrics = web.AppRunner(self.metrics_app(), **QUIET, handle_signals=False)
        self._metrics_site = await self._listen(
            self._metrics,
            config.metrics_port,
            self._metrics_tls(),
            (METRICS_CONNECTIONS, METRICS_CONNECTIONS_PER_IP),
            "metrics",
        )
        if config.progress_api_port is not None:
            await self._serve_progress_api(config.progress_api_port)
        self._probes = web.AppRunner(self.probe_app(), **QUIET, handle_signals=False)
        self._probe_site = await self._listen(
            self._probes,
            config.probe_port,
            None,
            (probes.CONNECTIONS, probes.PER_ADDRESS),
            "probes",
            min(probes.FIRST_REQUEST_TIMEOUT, config.first_request_timeout),
        )
        log.info(
            "serving",
            extra={
                "url": self.url,
                "webhook_url": self.webhook_url,
                "metrics_url": self.metrics_url,
                "probe_url": self.probe_url,
                "progress_api_url": self.progress_api_url,
            },
        )
        return self

    async def _serve_progress_api(self, port: int) -> None:
        """The aggregated API on ``port``: the serving certificate, and a client
        certificate of the API server's front proxy required (its CA read at start)."""
        config = self.config
        assert config.tls_cert_file is not None
        assert config.tls_key_file is not None
        tls = ReloadingTLS(
            config.tls_cert_file,
            config.tls_key_file,
            min_version=config.tls_min_version,
            poll_interval=config.tls_reload_interval,
            client_ca="",
        )
        self.progress_api = ProgressAPI(
            self.kube,
            self.budgets.reads,
            self.trainjobs,
            self.exporter.view,
            tls,
            # The others' newest updates: those of the TrainJobs they write.
            self.replicas if self.forwarder is not None else None,
        )
        await tls.start()
        await self.progress_api.start()
        self._progress = web.AppRunner(self.progress_api.app(), **QUIET, handle_signals=False)
        self._progress_site = await self._listen(
            self._progress, port, tls.context, PROGRESS_API_CONNECTIONS, "progress-api"
        )

    async def stop(self) -> None:
        self.shutting_down = True
        # The drain starts at once, beside the in-flight requests: from now on a post is
        # answered 503 (retried on another replica), and what was answered 200 is written.
        drained = asyncio.ensure_future(self._drain())
        try:
            if self._serving is not None:
                if self._site is not None:
                    # Load balancers still send new connections for a moment: 503.
                    await asyncio.sleep(self.config.shutdown_delay)
                # Stops accepting, then waits for in-flight requests up to shutdown_timeout.
                await self._serving.cleanup()
        finally:
            await drained
        if self.replicas is not None:
            await self.replicas.stop()
        if self._webhook is not None:
            # Admissions are answered until the status port has drained: pods created
            # meanwhile still get their variables.
            await self._webhook.cleanup()
        if self._metrics is not None:
            await self._metrics.cleanup()
        if self._progress is not None:
            await self._progress.cleanup()
        if self.progress_api is not None:
            await self.progress_api.stop()
            await self.progress_api.tls.stop()
        if self._probes is not None:
            await self._probes.cleanup()
        self.exporter.stop()
        if self.tls is not None:
            await self.tls.stop()
        if self.token_auth is not None:
            await self.token_auth.stop()
        if self.ca_distribution is not None:
            await self.ca_distribution.stop()
        await self.trainjobs.stop()
        if self.jobset_steps is not None:
            await self.jobset_steps.stop()
        if self.certs is not None:
            await self.certs.stop()
        await self.kube.close()
        log.info("stopped")

    async def _drain(self) -> None:
        """What was answered 200 is written, or given to a replica that stays, within
        ``--drain-timeout``: first what waits for another replica (given, or written
        here), then the writer's drain."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.drain_timeout
        if self.forwarder is not None:
            await self.forwarder.stop()
        await self.writer.stop(max(0.0, deadline - loop.time()))

    async def __aenter__(self) -> StatusServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def _serving_tls(config: Config) -> ReloadingTLS | None:
    if config.insecure_http:
        return None
    if config.tls_cert_file is None or config.tls_key_file is None:
        raise ValueError("a TLS certificate and key are required without --insecure-http")
    return ReloadingTLS(
        config.tls_cert_file,
        config.tls_key_file,
        min_version=config.tls_min_version,
        poll_interval=config.tls_reload_interval,
    )


def _cert_bootstrap(config: Config, kube: KubeClient) -> CertBootstrap | None:
    if not config.cert_bootstrap:
        return None
    cert_file, key_file, ca_file = config.tls_cert_file, config.tls_key_file, config.ca_path
    if cert_file is None or key_file is None or ca_file is None:
        raise ValueError("--cert-bootstrap needs --tls-cert-file and --tls-key-file")
    settings = CertSettings(
        namespace=config.service_namespace,
        dns_names=certs.dns_names(config.service_name, config.service_namespace),
        cert_file=cert_file,
        key_file=key_file,
        ca_file=ca_file,
        secret_name=config.cert_secret,
        check_interval=config.cert_check_interval,
    )
    webhook = (
        WebhookCABundle(kube, config.webhook_configuration)
        if config.webhook_configuration
        else None
    )
    apiservice = (
        APIServiceCABundle(kube, APISERVICE) if config.progress_api_port is not None else None
    )
    return CertBootstrap(kube, settings, webhook, apiservice=apiservice)


def _injector_settings(config: Config) -> InjectorSettings:
    return InjectorSettings(
        target=Target(
            service=config.service_name,
            namespace=config.service_namespace,
            port=config.service_port,
            ca_configmap=config.ca_configmap,
        ),
        selector=Selector.parse(config.inject_selector),
        override_existing=config.override_existing,
        timeout=config.inject_timeout,
    )


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", "::"):  # noqa: S104 - naming the wildcard, not binding it
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host
