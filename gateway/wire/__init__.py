"""The wire: frames and headers, the protocol codec, Kafka API keys, group messages <-> the sans-I/O dataclasses."""
