"""The group layer: group APIs answered by the gateway, the coordinator runtime and its shards, offsets, the cluster's side."""
