"""The whole-request authorization checks of the group APIs the gateway answers itself (the per-group
and per-topic checks inside a request are the handlers'; the ACL model is gateway/authz/groups.py): an API
that names one group is refused in its own shape before any state is touched, and an offset request of a
cluster-only (streams) group, forwarded as the client's bytes under the gateway's principal, is checked
first and its all-topics answer filtered."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

from coordinator import regex as rx
from coordinator.errors import ApiError, Errors
from gateway.authz.groups import (
    DESCRIBE,
    GROUP_OPERATION,
    TOPIC,
    TOPIC_OPERATION,
    TRANSACTIONAL_ID,
    WRITE,
    GroupAuthorizer,
    subscribed_topics,
)
from gateway.groups.requests import RequestContext, refusal_payload
from gateway.wire import codec
from gateway.wire import group_codec as gc
from gateway.wire.api_keys import ApiKey

if TYPE_CHECKING:
    from gateway.groups.metadata_watch import MetadataWatch


class RequestAuthorization:
    def __init__(
        self, authorizer: GroupAuthorizer | None, watch: MetadataWatch, counters: collections.Counter[str]
    ) -> None:
        self.authorizer = authorizer
        self.watch = watch
        self.counters = counters

    async def whole_request(self, ctx: RequestContext, msg: Any) -> bytes | None:
        """The whole-request checks of an API that names one group (gateway/authz/groups.py): the refusal
        in the API's shape, or None to go on (per-group and per-topic checks are the handlers')."""
        api_key, version = ctx.api_key, ctx.api_version
        op = GROUP_OPERATION.get(api_key)
        if op is None:
            return None
        access = ctx.access
        error: int | None = None
        if api_key == ApiKey.TXN_OFFSET_COMMIT and not await access.allows(WRITE, TRANSACTIONAL_ID, msg.transactional_id):
            error = Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        elif not await access.group(op, msg.group_id):
            error = Errors.GROUP_AUTHORIZATION_FAILED
        elif api_key in TOPIC_OPERATION:
            topics = subscribed_topics(api_key, msg)
            regex = getattr(msg, "subscribed_topic_regex", None) if api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT else None
            if regex and self.authorizer is not None and self.authorizer.strict:
                # Kafka assigns only the matching topics the member may describe (KAFKA-18813); the gateway's
                # coordinator cannot filter per principal, so strict mode refuses a pattern that matches
                # one it may not (checked when the pattern is sent, against the topics known then).
                try:
                    topics = [*topics, *rx.resolve(regex, self.watch.topics)]
                except ApiError:
                    pass  # an invalid pattern: the coordinator answers INVALID_REGULAR_EXPRESSION
            if topics and len(await access.topics(TOPIC_OPERATION[api_key], topics)) < len(topics):
                # Kafka answers the heartbeat itself, without a member id or epoch.
                self.counters["authorization_refusals"] += 1
                ctx.refuse(f"authorization:{Errors.TOPIC_AUTHORIZATION_FAILED.name}", access.reason)
                return codec.encode_response(
                    api_key, version, ctx.correlation_id, gc.response(api_key, version, error_code=Errors.TOPIC_AUTHORIZATION_FAILED)
                )
        return None if error is None else self.refuse(ctx, msg, error)

    async def forward_offsets(self, ctx: RequestContext, msg: Any, group_id: str) -> bytes:
        """An offset request of a streams group, forwarded as the client's bytes under the gateway's
        principal: the group and every named topic are checked first; a request naming a topic the
        principal may not use is refused whole (the forwarded bytes cannot drop it), and an all-topics
        OffsetFetch answer leaves out the topics the principal may not describe."""
        api_key, version, access = ctx.api_key, ctx.api_version, ctx.access
        if api_key == ApiKey.OFFSET_FETCH and not await access.group(DESCRIBE, group_id):
            return self.refuse(ctx, msg, Errors.GROUP_AUTHORIZATION_FAILED)
        ids: dict[Any, str] = {tid: name for name, (tid, _) in self.watch.topics.items()}
        if api_key == ApiKey.OFFSET_FETCH:
            asked = msg.topics if version < 8 else msg.groups[0].topics
        else:
            asked = msg.topics
        if asked is not None:
            names = [t.name or ids.get(getattr(t, "topic_id", None), "") for t in asked]
            wanted = [n for n in names if n]
            if len(await access.topics(TOPIC_OPERATION[api_key], wanted)) < len(wanted):
                return self.refuse(ctx, msg, Errors.TOPIC_AUTHORIZATION_FAILED)
        answer = await ctx.send_upstream(group_id, None)
        if api_key != ApiKey.OFFSET_FETCH or asked is not None:
            return answer
        try:
            _, r = codec.decode_response(api_key, version, answer)
        except Exception:  # noqa: BLE001 - an answer that cannot be read shows nothing
            return self.refuse(ctx, msg, Errors.GROUP_AUTHORIZATION_FAILED)
        holder = r if version < 8 else r.groups[0]
        shown = []
        for t in holder.topics:
            name = t.name or ids.get(getattr(t, "topic_id", None), "")
            if name and await access.allows(DESCRIBE, TOPIC, name):
                shown.append(t)
        holder.topics = shown
        return codec.encode_response(api_key, version, ctx.correlation_id, r)

    def refuse(self, ctx: RequestContext, msg: Any, error: int) -> bytes:
        self.counters["authorization_refusals"] += 1
        ctx.refuse(f"authorization:{Errors(error).name}", ctx.access.reason)
        return refusal_payload(ctx.api_key, ctx.api_version, ctx.correlation_id, msg, error, Errors(error).name)
