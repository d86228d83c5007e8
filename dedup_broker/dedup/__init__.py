"""dedup."""
