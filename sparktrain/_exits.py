"""What went wrong, as the CLI says it on stderr, and its exit code (docs/cli.md lists them)."""

from __future__ import annotations

import typer
from rich.console import Console

from sparktrain.errors import (
    AmbiguousJobId,
    ApiError,
    Interrupted,
    LocalFileError,
    NotTheService,
    SparktrainError,
    Unreachable,
    UsageError,
)

OK, FAILED, USAGE, CANCELLED, UNREACHABLE, SERVICE_FAILED, INTERRUPTED = 0, 1, 2, 3, 4, 5, 130
OUTCOME = {"SUCCEEDED": OK, "FAILED": FAILED, "CANCELLED": CANCELLED}
_GLOBAL = {"--json": "", "--url": " URL", "--api-key": " KEY"}
"""The options that come before the command, with what each takes."""


def reported(exc: Exception, err: Console) -> int:
    """Say what went wrong on ``err``; the exit code. Anything else is raised again."""
    if isinstance(exc, typer.Abort | Interrupted):
        err.print(str(exc) or "interrupted", highlight=False)
        return INTERRUPTED
    if isinstance(exc, typer.TyperException):  # usage errors (typer's own click)
        show = getattr(exc, "show", None)
        try:
            show() if callable(show) else err.print(str(exc))
        except BrokenPipeError:  # click writes to stderr itself: its reader went away
            err.on_broken_pipe()
        option = getattr(exc, "option_name", None)
        if option in _GLOBAL and (hint := _global_hint(exc, option)):
            err.print(hint, highlight=False)
        return int(getattr(exc, "exit_code", USAGE))
    if isinstance(exc, AmbiguousJobId):
        err.print(str(exc) + ":", highlight=False)
        for job in exc.candidates:
            err.print(f"  {job['id']}  {job['status']:<10} {job.get('name') or ''}", highlight=False)
        return USAGE
    if isinstance(exc, LocalFileError | UsageError | NotTheService):
        err.print(str(exc), highlight=False)
        return USAGE
    if isinstance(exc, Unreachable):
        err.print(f"unreachable: {exc}", highlight=False)
        return UNREACHABLE
    if isinstance(exc, ApiError) and exc.status >= 500:  # not 502/503/504 (Unreachable): the service failed
        request_id = exc.problem.get("request_id")
        named = f" (request id {request_id})" if request_id else ""
        said = exc.summary  # its field errors are not the service's failure
        err.print(f"the service failed: {said}{named}; report it to the service's operators", highlight=False)
        return SERVICE_FAILED
    if isinstance(exc, ApiError):
        request_id = exc.problem.get("request_id")
        said = exc.summary  # the first line: the field errors follow as the CLI says them
        said = f"{said.rstrip('.')}; give a key with --api-key or SPARKTRAIN_API_KEY" if exc.status == 401 else said
        err.print(f"refused: {said}" + (f" (request id {request_id})" if request_id else ""), highlight=False)
        fields = exc.problem.get("errors") or []
        for item in fields if len(fields) > 1 else []:  # one field is the detail already
            err.print(f"  {item.get('loc')}: {item.get('msg')}", highlight=False)
        return USAGE
    if isinstance(exc, SparktrainError):
        err.print(str(exc), highlight=False)
        return FAILED
    raise exc


def _global_hint(exc: Exception, option: str) -> str | None:
    """A global option given after the command (kubectl and mlflow users put them there): where it goes. One before
    the command without its value (``sparktrain --url``): that it needs one. Nothing for ``--json=x``."""
    ctx = getattr(exc, "ctx", None)
    command = ctx.info_name if ctx is not None and ctx.parent is not None else "COMMAND"
    usage = f"sparktrain {option}{_GLOBAL[option]} {command} ..."
    if type(exc).__name__ == "NoSuchOption":  # typer's own click's
        return f"{option} is a global option: it comes before the command ({usage})"
    return f"{option} needs a value: {usage}" if "requires an argument" in str(exc) else None
