"""The kplay command: its options and its reports (app.py), over the engine."""

from .app import app

__all__ = ["app"]
