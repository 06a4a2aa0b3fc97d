"""Authorization as a broker enforces it: the cluster's ACLs, checks of group APIs and of passed-through requests."""
