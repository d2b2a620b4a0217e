"""Writes an accepted update to the TrainJob's status subresource.

One server-side apply per accepted post (field manager ``trainer-status``, force), as the
peer does. The coalescing writer replaces this with one pending update per TrainJob.
"""

from __future__ import annotations

from . import errors
from .kube.client import KubeClient
from .kube.errors import KubeError, KubeUnavailable
from .validation import TrainerStatus


class DirectWriter:
    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube

    async def write(self, namespace: str, name: str, update: TrainerStatus) -> None:
        """Apply ``update``; a failure becomes the metav1.Status the post answers."""
        try:
            await self.kube.apply_trainjob_status(namespace, name, update.to_json())
        except KubeUnavailable as exc:
            raise errors.unavailable() from exc
        except KubeError as exc:
            raise errors.from_api_error(exc.status, exc.body) from exc
