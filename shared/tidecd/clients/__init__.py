"""The edges: one client per outside service (cluster, store, GitHub, OCI registry, secrets, tools, metrics)."""
