"""Certificate bootstrap: the server's own CA and serving certificate, with no other
component installed (the default; the cert-manager component turns it off).

One Secret (``kubernetes.io/tls`` plus ``ca.crt``/``ca.key``, see ``pki.py``) is the
truth every replica shares. At start and every ``check_interval`` a replica reads it,
creates it when absent (create, not apply: when two replicas race, the API server keeps
the first and the second reads it back), renews what is due with a conditional update
(a replica that loses the race reads the winner's), writes the files ``ReloadingTLS``
serves from, and keeps the webhook configuration's ``caBundle`` equal to ``ca.crt``.

Key material goes to the Secret and to 0600 files, nowhere else: logs name serial
numbers and expiry dates only.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import logging
import os
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..kube.backoff import Backoff
from ..kube.client import KubeClient
from ..kube.errors import KubeError, KubeUnavailable
from ..kube.resources import APISERVICES, MUTATING_WEBHOOK_CONFIGURATIONS, SECRETS, Obj
from . import pki

log = logging.getLogger(__name__)

FIELD_MANAGER = "trainjob-status-certs"
LABELS = {
    "app.kubernetes.io/name": "trainjob-status",
    "app.kubernetes.io/managed-by": "trainjob-status",
}
_MAX_CONFLICTS = 5
RETRY_BACKOFF = Backoff(base=1.0, cap=30.0)


class WebhookCABundle:
    """Keeps ``clientConfig.caBundle`` of every service-backed webhook in the
    MutatingWebhookConfiguration ``name`` equal to the CA bundle."""

    def __init__(self, kube: KubeClient, name: str = "trainjob-status") -> None:
        self.kube = kube
        self.name = name
        self._missing_logged = False

    async def sync(self, ca_pem: bytes) -> bool:
        """Patch what differs; True when something was patched. A configuration that
        does not exist (not installed yet, or another overlay) is not an error."""
        config = await self.kube.get(MUTATING_WEBHOOK_CONFIGURATIONS, None, self.name)
        if config is None:
            if not self._missing_logged:
                log.info(
                    "webhook configuration not found", extra={"webhook_configuration": self.name}
                )
                self._missing_logged = True
            return False
        self._missing_logged = False
        want = base64.b64encode(ca_pem).decode()
        ops: list[Obj] = []
        for index, hook in enumerate(config.get("webhooks") or []):
            client = hook.get("clientConfig") or {}
            if "service" not in client or client.get("caBundle") == want:
                continue
            # The test pins the index to the webhook we read: a reordered list fails
            # the patch (and the next round reads again) instead of patching another.
            ops.append({"op": "test", "path": f"/webhooks/{index}/name", "value": hook.get("name")})
            ops.append(
                {"op": "add", "path": f"/webhooks/{index}/clientConfig/caBundle", "value": want}
            )
        if not ops:
            return False
        await self.kube.patch(
            MUTATING_WEBHOOK_CONFIGURATIONS, None, self.name, ops, field_manager=FIELD_MANAGER
        )
        log.info(
            "webhook caBundle updated",
            extra={"webhook_configuration": self.name, "webhooks": len(ops) // 2},
        )
        return True


class APIServiceCABundle:
    """Keeps ``spec.caBundle`` of the APIService ``name`` (the aggregated API's) equal
    to the CA bundle, as the API server checks the port's certificate against it. While
    the APIService does not exist, ``missing`` is true: the bootstrap looks again every
    ``APISERVICE_RECHECK_SECONDS``, not at its check interval, so one applied after the
    server started is usable within seconds."""

    def __init__(self, kube: KubeClient, name: str) -> None:
        self.kube = kube
        self.name = name
        self.missing = False
        self._missing_logged = False

    async def sync(self, ca_pem: bytes) -> bool:
        """Patch it when it differs; True when patched. An APIService that does not
        exist (not registered, or not yet) is not an error."""
        found = await self.kube.get(APISERVICES, None, self.name)
        self.missing = found is None
        if found is None:
            if not self._missing_logged:
                log.info("apiservice not found", extra={"apiservice": self.name})
                self._missing_logged = True
            return False
        self._missing_logged = False
        want = base64.b64encode(ca_pem).decode()
        if (found.get("spec") or {}).get("caBundle") == want:
            return False
        ops: list[Obj] = [{"op": "add", "path": "/spec/caBundle", "value": want}]
        await self.kube.patch(APISERVICES, None, self.name, ops, field_manager=FIELD_MANAGER)
        log.info("apiservice caBundle updated", extra={"apiservice": self.name})
        return True


CABundleTarget = WebhookCABundle | APIServiceCABundle

APISERVICE_RECHECK_SECONDS = 10.0


@dataclass(frozen=True)
class CertSettings:
    namespace: str
    """Where the Secret lives: the server's own namespace."""
    dns_names: tuple[str, ...]
    cert_file: Path
    key_file: Path
    ca_file: Path
    secret_name: str = "trainjob-status-tls"
    policy: pki.Policy = field(default_factory=pki.Policy)
    check_interval: float = 300.0
    start_timeout: float = 60.0


class CertBootstrap:
    """Component: ``start()`` returns once the files hold a valid pair (or raises after
    ``start_timeout``); then a task keeps them, the Secret and the caBundle current."""

    def __init__(
        self,
        kube: KubeClient,
        settings: CertSettings,
        webhook: WebhookCABundle | None = None,
        *,
        apiservice: APIServiceCABundle | None = None,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
        backoff: Backoff = RETRY_BACKOFF,
    ) -> None:
        self.kube = kube
        self.settings = settings
        # Who checks the serving certificate against our CA: their caBundle follows it.
        self.targets: list[CABundleTarget] = [t for t in (webhook, apiservice) if t is not None]
        self.bundle: pki.Bundle | None = None
        self.renewals = 0  # Secret writes this replica made (creations included)
        self._clock = clock
        self._rand = rand
        self._backoff = backoff
        self._task: asyncio.Task[None] | None = None

    @property
    def ca_pem(self) -> bytes | None:
        return None if self.bundle is None else self.bundle.ca_pem

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        failures = 0
        try:
            async with asyncio.timeout(self.settings.start_timeout):
                while True:
                    try:
                        await self.ensure()
                        break
                    except (KubeError, KubeUnavailable, RuntimeError) as exc:
                        failures += 1
                        log.warning("certificate bootstrap failed", extra={"error": str(exc)})
                        await asyncio.sleep(self._backoff.delay(failures, self._rand()))
        except TimeoutError as exc:
            raise RuntimeError(
                f"no certificate within {self.settings.start_timeout:g}s: see the warnings above"
            ) from exc
        self._task = asyncio.create_task(self._run(), name="cert-bootstrap")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        failures = 0
        while True:
            if failures:
                delay = self._backoff.delay(failures, self._rand())
            else:
                # +-10%: replicas started together do not check together forever.
                delay = self.settings.check_interval * (0.9 + 0.2 * self._rand())
                if any(isinstance(t, APIServiceCABundle) and t.missing for t in self.targets):
                    delay = min(delay, APISERVICE_RECHECK_SECONDS)
            await asyncio.sleep(delay)
            try:
                await self.ensure()
                failures = 0
            except (KubeError, KubeUnavailable, RuntimeError) as exc:
                failures += 1
                log.warning("certificate check failed", extra={"error": str(exc)})
            except Exception:
                failures += 1
                log.exception("certificate check failed")

    # -- one round ---------------------------------------------------------------------

    async def ensure(self) -> pki.Bundle:
        """Read the Secret, renew what is due, write the files, sync the caBundle."""
        bundle = await self._current_bundle()
        self.bundle = bundle
        await asyncio.to_thread(write_files, bundle, self.settings)
        for target in self.targets:
            try:
                await target.sync(bundle.ca_pem)
            except (KubeError, KubeUnavailable) as exc:
                # Serving goes on; the next round tries again.
                log.warning(
                    "caBundle not updated", extra={"target": target.name, "error": str(exc)}
                )
        return bundle

    def _now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self._clock(), dt.UTC)

    async def _current_bundle(self) -> pki.Bundle:
        s = self.settings
        for _ in range(_MAX_CONFLICTS):
            secret = await self.kube.get(SECRETS, s.namespace, s.secret_name)
            current = _bundle_of(secret)
            now = self._now()
            decision = pki.assess(current, s.dns_names, now, s.policy)
            if not decision.needed:
                assert current is not None
                return current
            fresh = pki.carry_out(decision, current, s.dns_names, now, s.policy)
            try:
                if secret is None:
                    await self.kube.create(SECRETS, s.namespace, self._secret(fresh))
                else:
                    await self.kube.replace(
                        SECRETS, s.namespace, s.secret_name, _updated(secret, fresh)
                    )
            except KubeError as exc:
                if exc.status == 409:
                    # Another replica wrote first (AlreadyExists or Conflict): use theirs.
                    log.info("certificate secret written by another replica, rereading")
                    continue
                raise
            self.renewals += 1
            log.info(
                "certificate secret written",
                extra={"secret": s.secret_name, "reason": decision.reason, **pki.describe(fresh)},
            )
            return fresh
        raise RuntimeError(f"secret {s.secret_name} kept changing under us")

    def _secret(self, bundle: pki.Bundle) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": self.settings.secret_name,
                "namespace": self.settings.namespace,
                "labels": dict(LABELS),
            },
            "data": bundle.secret_data(),
        }


def _bundle_of(secret: Obj | None) -> pki.Bundle | None:
    if secret is None:
        return None
    try:
        return pki.Bundle.from_secret_data(secret.get("data"))
    except pki.BundleError as exc:
        log.warning("certificate secret unusable, replacing it", extra={"error": str(exc)})
        return None


def _updated(secret: Obj, bundle: pki.Bundle) -> Obj:
    """The Secret as read (its resourceVersion makes the update conditional; its type,
    labels and annotations stay) with the new data."""
    body = {k: v for k, v in secret.items() if k != "data" and k != "stringData"}
    body["data"] = bundle.secret_data()
    return body


def write_files(bundle: pki.Bundle, settings: CertSettings) -> bool:
    """Write the serving pair and the CA bundle where the server reads them; each file
    is replaced atomically and only when its content changed. True when any changed.

    Key first: a reader that sees the new key beside the old certificate fails to load
    the pair and keeps serving the previous one until the certificate follows."""
    changed = False
    for path, content, mode in (
        (settings.key_file, bundle.tls_key, 0o600),
        (settings.cert_file, bundle.tls_cert, 0o644),
        (settings.ca_file, bundle.ca_pem, 0o644),
    ):
        changed |= _replace_file(path, content, mode)
    return changed


def _replace_file(path: Path, content: bytes, mode: int) -> bool:
    with contextlib.suppress(OSError):
        if path.read_bytes() == content:
            return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return True


def dns_names(service: str, namespace: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    """The Service's names (see ``pki.service_dns_names``) and any ``extra`` ones."""
    names = pki.service_dns_names(service, namespace)
    return tuple(dict.fromkeys([*names, *extra]))
