"""How work reaches the reconcile step: Refresh messages and their dispatch, coalesced webhook
deliveries (`pending/`) and the local scheduler of continuations."""
