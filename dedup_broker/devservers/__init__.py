"""devservers."""
