"""``python -m lowerer``: the command line."""

from lowerer.cli import main

main(prog_name="lowerer")
