"""Programs that use the broker from outside: run from the project root with ``python -m``."""
