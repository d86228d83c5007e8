"""system_topics."""
