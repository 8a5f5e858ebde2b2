"""One reconcile step for one app, under its lease: observe, decide, execute, record, then return."""
