"""JSON layouts (Kafka's "data" schema format) of the connect group records, loaded by coordinator.connect.codec."""
