"""PIP-6 guaranteed deduplication: per-producer sequence-id high-water marks per topic."""
