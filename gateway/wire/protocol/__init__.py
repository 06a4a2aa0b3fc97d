"""Kafka messages the gateway needs that kafka-python 3.0.12 does not define (KIP-848 group APIs)."""
