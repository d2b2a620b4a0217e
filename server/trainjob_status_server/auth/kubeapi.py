"""The two API requests authentication needs that ``KubeClient`` has no public method
for: a GET of a non-resource path with its own ``Accept`` header (the JWKS route answers
406 to ``Accept: application/json``, which ``KubeClient`` always sends) and a POST of a
TokenReview.

Same configuration (kubeconfig or in-cluster), timeout and request budget as the given
``KubeClient``; errors are the same ``KubeError``/``KubeUnavailable``. This adapter goes
away once ``KubeClient`` grows a public ``request(method, path, body, accept)``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s_client

from ..kube.client import USER_AGENT, KubeClient, load_configuration
from ..kube.errors import KubeUnavailable, error_from_response

JWKS_ACCEPT = "application/jwk-set+json, application/json;q=0.9"
"""What a real API server serves the JWKS as, with JSON as a fallback for issuers that
serve it plainly (go-restful compares media types without parameters, so the first one
matches)."""


class ApiRequests:
    """``start()`` before use, ``close()`` after."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self._api: Any = None

    async def start(self) -> None:
        if self._api is None:
            configuration = await load_configuration(self.kube.kubeconfig)
            self._api = k8s_client.ApiClient(configuration)
            self._api.user_agent = USER_AGENT

    async def close(self) -> None:
        if self._api is not None:
            api, self._api = self._api, None
            await api.close()

    async def get_json(self, path: str, accept: str = "application/json") -> dict[str, Any]:
        """A GET of ``path``; its JSON object answer."""
        return await self._request("GET", path, {"Accept": accept}, None)

    async def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """A POST of ``body`` to ``path``; its JSON object answer."""
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        return await self._request("POST", path, headers, body)

    async def _request(
        self, method: str, path: str, headers: dict[str, str], body: dict[str, Any] | None
    ) -> dict[str, Any]:
        if self._api is None:
            raise RuntimeError("ApiRequests used before start() or after close()")
        await self._take_budget()
        timeout = aiohttp.ClientTimeout(
            total=self.kube.timeout,
            connect=self.kube.connect_timeout,
            sock_connect=self.kube.connect_timeout,
        )
        try:
            async with asyncio.timeout(self.kube.timeout):
                response: aiohttp.ClientResponse = await self._api.call_api(
                    path,
                    method,
                    header_params=dict(headers),
                    body=body,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=timeout,
                )
                try:
                    data = await response.read()
                finally:
                    response.release()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise KubeUnavailable(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if not 200 <= response.status < 300:
            raise error_from_response(
                response.status, response.reason or "", response.headers, data
            )
        try:
            decoded = json.loads(data)
        except ValueError as exc:
            raise KubeUnavailable(f"{method} {path}: answer is not JSON") from exc
        if not isinstance(decoded, dict):
            raise KubeUnavailable(f"{method} {path}: answer is not an object")
        return decoded

    async def _take_budget(self) -> None:
        # The client's shared budget: authentication's requests count against the same
        # QPS as the writer's, so they can never add load the operator did not allow.
        wait = self.kube.budget.reserve()
        if wait > 0:
            try:
                await asyncio.sleep(wait)
            except asyncio.CancelledError:
                self.kube.budget.cancel()
                raise
