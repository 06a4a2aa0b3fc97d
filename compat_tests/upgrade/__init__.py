"""Rolling upgrade (classic -> KIP-848 consumer protocol) and rolling downgrade of a live consumer fleet.

Modelled on the shape of Kafka's own consumer protocol migration system test: a 6-partition topic,
5 consumers, a producer running throughout, consumers restarted one at a time with the other protocol,
each restart waiting for the group to settle. Used by compat_tests/test_rolling_upgrade.py (through the
gateway) and by bench/upgrade.py (the broker's own coordinator and the gateway, side by side).
"""
