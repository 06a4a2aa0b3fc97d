"""The topic image the group coordinator assigns from: name -> (topic id, partition count).

KIP-848 computes assignments on the server, so the coordinator must see topics come, go and grow.
The watcher asks the upstream for all topics (Metadata v10+ carries topic ids) every
``interval_s`` and on demand when a group request names a topic the image lacks, or subscribes by
regex (the request waits for that refresh so it is handled against the new image, in its turn). Concurrent demands share one
refresh. Changes are handed to ``on_change`` (the group layer feeds GroupService.on_metadata).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kafka.protocol.metadata import MetadataRequest

from gateway.logging import get_logger
from gateway.net.upstream import UpstreamError
from gateway.net.upstream_client import UpstreamClient
from gateway.wire.api_keys import ApiKey

log = get_logger("gateway.groups.metadata_watch")

TopicImage = dict[str, tuple[uuid.UUID, int]]
_WANTED_VERSION = 12
_MIN_VERSION = 10  # the first Metadata version with topic ids
# A name that stays unknown after a refresh does not trigger another one sooner than this.
_MISSING_RETRY_S = 1.0


class MetadataWatch:
    def __init__(
        self, client: UpstreamClient, on_change: Callable[[TopicImage], None], interval_s: float = 5.0
    ) -> None:
        self.client = client
        self.on_change = on_change
        self.interval_s = interval_s
        self.topics: TopicImage = {}
        self.loaded = False
        self._inflight: asyncio.Future[None] | None = None
        self._missing_checked: dict[str, float] = {}
        self._refreshed_at = float("-inf")  # time.monotonic() of the last completed refresh

    async def fetch(self) -> TopicImage:
        version = self.client.version(ApiKey.METADATA, _WANTED_VERSION)
        if version < _MIN_VERSION:
            raise UpstreamError(f"the upstream's Metadata v{version} carries no topic ids (need v10+)")
        msg = MetadataRequest[version](topics=None, allow_auto_topic_creation=False)
        r: Any = await self.client.send_any(ApiKey.METADATA, version, msg)
        image: TopicImage = {}
        for t in r.topics:
            if t.error_code == 0 and t.name and t.topic_id is not None:
                image[t.name] = (t.topic_id, len(t.partitions))
        return image

    async def refresh(self) -> None:
        """One refresh; concurrent callers share it. Raises UpstreamError."""
        if self._inflight is not None:
            await asyncio.shield(self._inflight)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._inflight = fut
        try:
            image = await self.fetch()
            changed = image != self.topics or not self.loaded
            self.topics = image
            self.loaded = True
            self._refreshed_at = time.monotonic()
            if changed:
                self.on_change(image)
            fut.set_result(None)
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # retrieved
            raise
        finally:
            self._inflight = None

    def missing(self, names: Iterable[str]) -> list[str]:
        now = time.monotonic()
        out = []
        for n in names:
            if n in self.topics:
                continue
            if now - self._missing_checked.get(n, 0.0) < _MISSING_RETRY_S:
                continue
            out.append(n)
        return out

    async def ensure(self, names: Iterable[str], regex: bool = False) -> None:
        """Refresh first when a named topic is unknown (at most once a second per unknown name).

        ``regex``: the request subscribes by pattern, which may match a topic the image lacks but
        cannot name it: refresh the whole image unless it is less than a second old."""
        missing = self.missing(names)
        if regex and time.monotonic() - self._refreshed_at >= _MISSING_RETRY_S:
            try:
                await self.refresh()
            except UpstreamError as e:
                log.warning("on-demand metadata refresh failed", error=str(e))
            missing = self.missing(missing)
        if not missing:
            return
        try:
            await self.refresh()
        except UpstreamError as e:
            log.warning("on-demand metadata refresh failed", error=str(e))
        now = time.monotonic()
        for n in missing:
            if n not in self.topics:
                self._missing_checked[n] = now
        if len(self._missing_checked) > 10_000:
            self._missing_checked.clear()

    async def ensure_fresh(self) -> None:
        """Refresh now (sharing a refresh in flight), whatever the image's age; a failure is logged."""
        try:
            await self.refresh()
        except UpstreamError as e:
            log.warning("on-demand metadata refresh failed", error=str(e))

    async def run_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.refresh()
            except UpstreamError as e:
                log.warning("topic metadata refresh failed", error=str(e))
