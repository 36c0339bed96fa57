"""Kernel families: one folder each, found by its task.toml (see README.md here)."""
