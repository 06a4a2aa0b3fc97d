"""groupgate: coordinator layer — the KIP-848 consumer group coordinator, sans-I/O.

Entry point: ``coordinator.service.ConsumerGroupCoordinator`` (see its docstring for how gateway/ and
translate/ call it). Every call takes ``now_ms`` and returns an ``Outcome`` (response, records, timers).

Modules:
- ``messages``: decoded ConsumerGroupHeartbeat request/response (v0-v1), independent of the wire codec.
- ``errors``: Kafka error codes (``Errors``) and ``ApiError``.
- ``model``: consumer groups, members (consumer or classic), states; ``config``: settings, assignor registry.
- ``heartbeat``: the ConsumerGroupHeartbeat handler; ``membership``: group operations it shares with translate/.
- ``target``: target assignment through ``assignors.api.ServerAssignor``; ``reconcile``: per-member reconciliation.
- ``records`` (+ ``records.codec``): the records Kafka 4.x persists; ``replay``: records -> state.
- ``timers``: timer keys and changes; ``regex``: RE2 subscriptions; ``describe``: ConsumerGroupDescribe and
  ListGroups views; ``offsets``: offset commit / fetch validation.
"""
