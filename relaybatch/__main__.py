"""The `relaybatch` command (and `python -m relaybatch`).

The command line's modules take a moment to import (longer on a busy machine): a Ctrl-C in that
moment ends quietly with exit 130, as any other Ctrl-C does, instead of a KeyboardInterrupt
traceback. Nothing has started then, so there is nothing to resume.

Once a command is over the process leaves without tearing down its modules: Python's own exit
first joins the threads still running and runs the exit handlers (logging, telemetry and Prefect
flush there), and so does ``_leave``; what it skips is the teardown of every imported module
(pyarrow, pydantic, rich, ...), which took 1.3 s of a Ctrl-C'd run's exit on a busy machine
(1.85 s from the signal to the exit -> 0.39 s; benchmarks/stop_at_the_limit.py).
"""

import sys


def main() -> None:
    try:
        from relaybatch.cli import main as run_command_line
    except KeyboardInterrupt:
        print("stopped before anything started", file=sys.stderr)
        sys.exit(130)
    try:
        run_command_line()
    except SystemExit as ended:
        _leave(_exit_code(ended.code))
    _leave(0)


def _exit_code(code: object) -> int:
    """What Python's own exit makes of ``sys.exit(code)``: a message is printed and exits 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _leave(code: int) -> None:
    """Python's exit without the module teardown: threads joined, exit handlers run, output flushed."""
    import atexit
    import contextlib
    import os
    import threading

    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter's exit calls first
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more can be said there
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
