"""The compatibility harness: brokers, the gateway process, Java tools, Python clients and invariants.

Everything here treats groupgate as a black box on the wire; it builds on the product's own helpers
(gateway.ops.embedded_kafka, gateway.ops.kafka_dist) rather than duplicating them.
"""
