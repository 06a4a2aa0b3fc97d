"""The network floor: listeners, client connections, upstream links, address rewriting, limits, refusals."""
