"""A reader that goes away. stdout's (``sparktrain jobs | head -1``): the command stops at once and quietly, with
exit code 141, what a shell reports for a program that SIGPIPE ended (Python ignores SIGPIPE: a write raises
BrokenPipeError); exit 1 would say the job failed. stderr's (``2>&1 | head`` cut short, a log reader gone): stderr goes
quiet and the command goes on, its results on stdout and its exit code as they would have been."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import IO, Any

from rich.console import Console

CLOSED = 141
"""128 + SIGPIPE."""


class PipeClosed(Exception):
    """stdout was closed by its reader (not an OSError: click turns those into exit 1)."""


class Output(Console):
    """A console whose reader may go away: stdout's stops the command (rich's own exits with 1), stderr's makes
    stderr quiet."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        if self.stderr:
            to_devnull(sys.stderr)
            return
        raise PipeClosed


def pipe_closed(exc: BaseException) -> bool:
    """A BrokenPipeError, or the exit that one turned into on the way (click's EPIPE exit 1, rich's own console)."""
    return isinstance(exc, BrokenPipeError) or (
        isinstance(exc, SystemExit) and isinstance(exc.__context__, BrokenPipeError)
    )


def to_devnull(stream: IO[Any]) -> None:
    """Point a standard stream at /dev/null, as the Python docs' note on SIGPIPE does: what it still buffers is
    written there, not to the closed pipe at exit ("Exception ignored ... BrokenPipeError", exit 120)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError, AttributeError):  # a stream without a file descriptor, or None
        os.dup2(devnull, stream.fileno())
    os.close(devnull)


def silence() -> None:
    """stdout's reader went away: nothing more is written to it (stderr, whose reader is there, stays as it is)."""
    to_devnull(sys.stdout)


def flush_stdout() -> None:
    """Write what stdout still buffers now, while a closed pipe can still end the command with 141 (at exit it is
    exit 120); stderr's failing flush only makes stderr quiet."""
    try:
        sys.stdout.flush()
    except BrokenPipeError as exc:
        raise PipeClosed from exc
    except (AttributeError, ValueError):  # no stdout, or a closed one
        pass
    try:
        sys.stderr.flush()
    except BrokenPipeError:
        to_devnull(sys.stderr)
    except (AttributeError, ValueError):
        pass
