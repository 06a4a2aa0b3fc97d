"""Several instances sharing the shards: membership in the instances group and its assignor."""
