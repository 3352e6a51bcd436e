"""How every command ends on a user's mistake: one line on stderr naming the problem (the option,
key or file), exit status 2. ``--debug`` on any command, or ``HLGT_DEBUG=1``, shows the traceback.

User mistakes are the errors the project raises for bad input and the operating system's for
files: ValueError (with its subclasses: bad config keys and values, JSON and Parquet that do not
parse, an annotator model that cannot load), KeyError and OSError (missing, unreadable or
unwritable files and folders). Anything else is a bug and keeps its traceback. Ctrl-C ends any
command with one line and exit status 130.

``positive_int``, ``non_negative_int``, ``positive_float``, ``beam_size`` and ``device`` are argparse
types: argparse names the option of a bad value. ``refuse_flag_keys`` keeps ``--set`` off the keys a
command's own flags set.
"""
from __future__ import annotations

import argparse
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
    """``main(argv)`` with ``--debug`` removed; a user error becomes one line and status 2,
    Ctrl-C one line and status 130."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = debugging(argv)
    try:
        return main([a for a in argv if a != "--debug"])
    except USER_ERRORS as error:
        if debug:
            raise
        print(f"{prog}: error: {message(error)}  (--debug shows the traceback)", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:
        if debug:
            raise
        print(f"{prog}: {str(interrupt) or 'interrupted'}", file=sys.stderr)
        return 130


def _int(text: str, least: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects an integer, got {text!r}")
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
    return value


def positive_int(text: str) -> int:
    return _int(text, 1, ">= 1")


def non_negative_int(text: str) -> int:
    return _int(text, 0, ">= 0")


def beam_size(text: str) -> int:
    """A beam width the model config allows (``model.beam_size``), checked before torch allocates it."""
    from hlgt.config import MAX_BEAM

    value = _int(text, 1, ">= 1")
    if value > MAX_BEAM:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_BEAM} (model.beam_size), got {value}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects a number, got {text!r}")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def device(text: str) -> str:
    """A torch device this machine has: checked before any model or data is loaded."""
    import torch  # here: commands whose --help does without torch import this module

    try:
        parsed = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"not a torch device: {text!r} (cpu, cuda, cuda:1, ...)")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise argparse.ArgumentTypeError(f"{text!r} asked for, but torch sees no CUDA device here")
    if parsed.type == "cuda" and (parsed.index or 0) >= torch.cuda.device_count():
        raise argparse.ArgumentTypeError(f"{text!r}: torch sees {torch.cuda.device_count()} CUDA device(s)")
    return text


def refuse_flag_keys(overrides: dict, flag_keys: dict[str, str], given_as: str = "--set ") -> None:
    """``ValueError`` when ``overrides`` (given as ``given_as`` KEY=VALUE) name a config key that one
    of the command's flags sets (``flag_keys``: key -> flag): which of the two should win would be a guess."""
    for key, flag in flag_keys.items():
        if key in overrides:
            raise ValueError(f"{given_as}{key}=... and {flag} both set {key}: use {flag}")
