"""JSON schemas (Kafka's message-definition format) loaded by gateway.protocol.messages."""
