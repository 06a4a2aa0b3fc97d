"""Security of the gateway's links: TLS contexts, SASL exchanges (passthrough and termination), OAUTHBEARER tokens."""
