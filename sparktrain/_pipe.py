"""A reader that goes away (``sparktrain jobs | head -1``): the command stops at once and quietly, with exit code
141, what a shell reports for a program that SIGPIPE ended (Python ignores SIGPIPE: a write raises BrokenPipeError).
Exit 1 would say the job failed."""

from __future__ import annotations

import contextlib
import os
import sys

from rich.console import Console

CLOSED = 141
"""128 + SIGPIPE."""


class PipeClosed(Exception):
    """stdout or stderr was closed by its reader (not an OSError: click turns those into exit 1)."""


class Output(Console):
    """A console that stops the command when its reader goes away (rich's own exits with 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise PipeClosed


def silence() -> None:
    """Point stdout and stderr at /dev/null, as the Python docs' note on SIGPIPE does: what is still buffered is
    written there, not to the closed pipe at exit ("Exception ignored ... BrokenPipeError")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a stream without a file descriptor
            os.dup2(devnull, stream.fileno())
    os.close(devnull)
