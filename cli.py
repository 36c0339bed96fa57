"""kplay from a checkout, without installing it: `python3 cli.py run sum --n 1e7`."""

from playground.cli import app

if __name__ == "__main__":
    app(prog_name="kplay")
