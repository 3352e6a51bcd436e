"""How every command ends on a user's mistake: one line on stderr naming the problem (the option,
key or file), exit status 2. ``--debug`` on any command, or ``HLGT_DEBUG=1``, shows the traceback.

User mistakes are the errors the project raises for bad input and the operating system's for
files: ValueError (with its subclasses: bad config keys and values, JSON and Parquet that do not
parse), KeyError and OSError (missing, unreadable or unwritable files and folders). Anything else
is a bug and keeps its traceback.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

USER_ERRORS = (ValueError, KeyError, OSError)


def debugging(argv: Sequence[str]) -> bool:
    return "--debug" in argv or os.environ.get("HLGT_DEBUG", "") not in ("", "0")


def message(error: BaseException) -> str:
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    return text or type(error).__name__


def run_command(main: Callable[[list[str]], int], prog: str, argv: Sequence[str] | None = None) -> int:
    """``main(argv)`` with ``--debug`` removed; a user error becomes one line and status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debugging(argv)
    try:
        return main([a for a in argv if a != "--debug"])
    except USER_ERRORS as error:
        if debug:
            raise
        print(f"{prog}: error: {message(error)}  (--debug shows the traceback)", file=sys.stderr)
        return 2
