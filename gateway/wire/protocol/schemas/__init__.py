"""JSON schemas (Kafka's message-definition format) loaded by gateway.wire.protocol.messages."""
