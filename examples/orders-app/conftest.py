# Empty on purpose: its directory goes on sys.path, so the tests import orders_app without an install
# (as when groupgate's own `make test` runs them). groupgate's fixtures come from its pytest11 entry point.
