"""Documents in the object store and their transitions: an app's status, operation and history."""
