"""Checkpoints (in progress)."""
