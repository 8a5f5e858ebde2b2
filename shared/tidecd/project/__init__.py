"""The AppProject's features: its rules for sources and destinations, sync windows, orphaned resources."""
