"""A client that behaves as the Kubeflow SDK's ``update_trainjob_status`` is described in
docs/design.md (written from that description, not from its code).

Five properties matter to the tests, one per flaw of that client:
1. a call within ``min_interval`` (5 s) of the last sent one is dropped (leading edge);
2. the post happens on the caller's thread, waiting up to ``timeout`` (5 s);
3. metrics go out as ``str(value)`` with no length or count limit, the ETA as given;
4. the token is cached for ``token_ttl`` (300 s), even after a 401;
5. no retry: a failed post is lost.
The body is JSON with ``lastUpdatedTime`` from ``datetime.now(timezone.utc).isoformat()``.
The SDK posts with ``requests``; urllib sends the same request (requests is not installed).
"""

from __future__ import annotations

import datetime as dt
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from trainjob_status.contract import CA_CERT_ENV, TOKEN_ENV, URL_ENV


class SdkLikeClient:
    def __init__(
        self,
        environ: Mapping[str, str],
        *,
        min_interval: float = 5.0,
        token_ttl: float = 300.0,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = environ.get(URL_ENV)
        self.token_path = environ.get(TOKEN_ENV)
        self.ca_path = environ.get(CA_CERT_ENV)
        self.min_interval = min_interval
        self.token_ttl = token_ttl
        self.timeout = timeout
        self.clock = clock
        self.last_sent: float | None = None
        self._token: str | None = None
        self._token_read: float | None = None
        self.answers: list[int] = []

    def update_trainjob_status(
        self,
        progress_percent: float | None = None,
        estimated_remaining_seconds: float | None = None,
        metrics: Mapping[str, Any] | None = None,
    ) -> bool:
        if not self.url:
            return False
        now = self.clock()
        if self.last_sent is not None and now - self.last_sent < self.min_interval:
            return False  # dropped: flaw 1
        self.last_sent = now
        status: dict[str, Any] = {"lastUpdatedTime": dt.datetime.now(dt.UTC).isoformat()}
        if progress_percent is not None:
            status["progressPercentage"] = progress_percent
        if estimated_remaining_seconds is not None:
            status["estimatedRemainingSeconds"] = estimated_remaining_seconds  # flaw 3
        if metrics:
            status["metrics"] = [{"name": str(k), "value": str(v)} for k, v in metrics.items()]
        request = urllib.request.Request(
            self.url,
            data=json.dumps({"trainerStatus": status}).encode(),
            headers={
                "Authorization": f"Bearer {self._read_token(now)}",
                "Content-Type": "application/json",
            },
            method="POST",
        )
        context = ssl.create_default_context(cafile=self.ca_path)
        try:  # on the caller's thread: flaw 2; no retry: flaw 5
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as answer:
                self.answers.append(answer.status)
                return bool(answer.status == 200)
        except urllib.error.HTTPError as exc:
            self.answers.append(exc.code)
        except OSError:
            self.answers.append(0)
        return False

    def _read_token(self, now: float) -> str:
        # Kept for token_ttl whatever the server says: flaw 4.
        if (
            self._token is None
            or self._token_read is None
            or now - self._token_read >= self.token_ttl
        ):
            assert self.token_path is not None
            with open(self.token_path) as handle:
                self._token = handle.read().strip()
            self._token_read = now
        return self._token
