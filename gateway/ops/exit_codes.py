"""The exit statuses of the ``groupgate`` command, said once for every subcommand (and for the scripts and
probes that start it)."""

EXIT_OK = 0
# A run that failed after it started: the gateway stopped on an unexpected error, a tool could not read
# or write what it was asked to (retrying may help).
EXIT_FAILED = 1
# Refused before doing anything: invalid configuration or arguments, credentials the cluster refuses, a
# right the gateway's principal lacks at start-up (the one line on stderr says which); retrying the same
# command does not help.
EXIT_USAGE = 2
# `serve` on a damaged state log or a store written with another shard count, and `state verify` on one
# that `serve` would refuse: the operator decides (groupgate state verify / repair).
EXIT_STATE_CORRUPT = 3
