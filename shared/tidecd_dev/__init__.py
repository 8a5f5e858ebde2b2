"""Dev tooling for tidecd, never shipped in the function zip: a local control plane, a git server, the demo,
the `tidecd dev` commands and the builder of the Go tools.

The product (`tidecd`) never imports this package (an import-linter contract says so); only tests, the
bench, `make demo` and the `tidecd dev` command group, loaded when it is called, do.
"""
