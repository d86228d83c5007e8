"""Backlog quotas."""
