"""Non-persistent topics (``non-persistent://``): messages live only in the broker's memory.

A published message goes at once to the consumers connected at that moment and is never
stored: nothing reaches Kafka, no cursor is kept, nothing is deduplicated or retained.
"""
