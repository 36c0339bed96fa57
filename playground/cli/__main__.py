"""`python -m playground.cli ...`: the kplay command (the notebook magic runs it so, in a child)."""

from .app import app

app(prog_name="kplay")
