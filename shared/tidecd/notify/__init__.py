"""What happened, told to the people who asked: events from state changes, delivered per service."""
