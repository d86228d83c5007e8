"""A long-run, history-based checker: a cluster under faults, every reading path checked
against what the producers had acknowledged (docs/reliability.md)."""
