"""Group state storage: the store protocol, the file store and its segments, the state topic, check and repair."""
