"""Whether a TrainJob exists, as the status path asks it before it accepts a post."""

from __future__ import annotations

from ..failures import Unavailable
from ..kube.cache import WatchCache
from ..kube.errors import KubeUnavailable


class CachedTrainJobs:
    """The TrainJob cache, with one GET on a miss (``WatchCache.get_or_fetch``, which
    also remembers a TrainJob found absent for a while). An API server that cannot be
    reached is ``Unavailable``: the post is answered 503, not 404."""

    def __init__(self, cache: WatchCache) -> None:
        self.cache = cache

    async def trainjob_exists(self, namespace: str, name: str) -> bool:
        try:
            return await self.cache.get_or_fetch(namespace, name) is not None
        except KubeUnavailable as exc:
            raise Unavailable.of(exc) from exc
