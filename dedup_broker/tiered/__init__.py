"""Tiered storage policies: when closed ledgers are offloaded."""
