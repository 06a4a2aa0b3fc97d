"""A structure-aware request fuzzer for the gateway, and the live consumer groups that run beside it.

Requests are built from the Kafka message schemas (kafka-python's JSON schemas, plus the gateway's own for
ConsumerGroupHeartbeat/ConsumerGroupDescribe) for every api key and version the gateway advertises in
ApiVersions, with random field values: group and member ids from small pools (so requests meet each
other's groups), nulls for nullable and non-nullable strings and arrays, negative and oversized lengths,
empty arrays, unknown tagged fields. Then the frame bytes are mutated: bit flips, truncation, extension,
a size prefix that lies, unknown api keys, versions out of range, the other header version.

Several frames are pipelined per connection over several concurrent connections. After each batch a
sentinel ApiVersions request follows; since a Kafka server answers in request order, its answer proves
that every frame before it was handled. Each batch must end in that answer or a close of the connection;
neither within the timeout is a *silent* connection. Answers must carry the correlation id of the frame
they answer, in order; Produce with acks=0 expects none (as on a broker).

The fuzzer never names the live groups' topic or groups: its names come from its own pools, so whatever it
sends may fail but can never legitimately change what the live groups consume or commit.

The parts: ``generate`` builds the fuzzed frames (schema-driven values, then byte mutations); ``oracle``
says what a Kafka server must do with the bytes it got (how it splits the stream, which frames are
answered); ``runner`` sends the batches and checks the answers against the oracle; ``live_groups`` runs
the producer and consumer groups beside it; ``gateway_health`` reads the gateway's log for tracebacks
and its memory.
"""
