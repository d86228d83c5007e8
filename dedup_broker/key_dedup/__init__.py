"""Key-window deduplication in Redis: a key, a time window, no repeats."""
