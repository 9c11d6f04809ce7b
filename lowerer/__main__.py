"""``python -m lowerer`` and the ``lowerer`` command: signal handling first, then the command line.

Nothing heavy is imported before :func:`lowerer.core.interrupts.install` has run, so an interrupt at
any moment (even while onnx or onnxruntime are being imported) ends in one line and no traceback.
"""

from lowerer.core import interrupts


def main() -> None:
    """Run the ``lowerer`` command line (the console script's entry point)."""
    interrupts.install()
    from lowerer.cli import main as command

    command(prog_name="lowerer")


if __name__ == "__main__":
    main()
