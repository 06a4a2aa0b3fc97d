"""The ``connect`` group type, sans-I/O: Kafka Connect workers on the new rebalance protocol.

Built like the consumer groups of coordinator/ (docs/connect.md): the state changes only by applying
records (``records.apply``), so replaying the emitted records rebuilds the same groups; timers are data
(``coordinator.timers``); every call takes ``now_ms`` and returns an ``Outcome``.

Modules:
- ``model``: groups, workers, client-side assignors, connectors and tasks, target and current assignments.
- ``records``: the records a connect group is made of and ``apply`` (records -> state).
- ``messages``: ConnectGroupHeartbeat, ConnectGroupPrepareAssignment and ConnectGroupInstallAssignment,
  decoded.
- ``assignors``: which client-side assignor the group uses and which worker runs it.
- ``reconcile``: a worker's next current assignment toward its target (revoke first).
- ``service``: ``ConnectGroupCoordinator``, the entry point.
"""
