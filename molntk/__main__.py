"""``python -m molntk``: the ``molntk`` command."""

from molntk.cli import app

if __name__ == "__main__":
    app(prog_name="molntk")
