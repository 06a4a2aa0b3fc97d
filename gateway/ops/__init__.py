"""Operating the gateway: the command line, the admin HTTP listener, the embedded Kafka and its distributions."""
