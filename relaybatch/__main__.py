"""The `relaybatch` command (and `python -m relaybatch`).

The command line's modules take a moment to import (longer on a busy machine): a Ctrl-C in that
moment ends quietly with exit 130, as any other Ctrl-C does, instead of a KeyboardInterrupt
traceback. Nothing has started then, so there is nothing to resume.
"""

import sys


def main() -> None:
    try:
        from relaybatch.cli import main as run_command_line
    except KeyboardInterrupt:
        print("stopped before anything started", file=sys.stderr)
        sys.exit(130)
    run_command_line()


if __name__ == "__main__":
    main()
