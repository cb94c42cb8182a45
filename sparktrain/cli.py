"""``sparktrain``: the service from a terminal (docs/cli.md). This module has the job commands and the console
script; :mod:`sparktrain._model_commands` has the registry's.

Exit codes: 0 the job succeeded (or the command did what it was asked), 1 the job failed, 2 a usage error (a local
file that cannot be read or written too), something at the URL that is not a sparktrain service, or a request the
service refused (4xx), 3 the job was cancelled, 4 the service is unreachable (no answer, 502/503/504), 5 the service
failed (another 5xx), 130 interrupted, 141 stdout's reader went away (``| head``).
The service's address and key come from ``--url``/``--api-key`` or ``SPARKTRAIN_URL``/``SPARKTRAIN_API_KEY``.
"""

from __future__ import annotations

import json
import signal
import sys
from contextlib import nullcontext
from types import FrameType
from typing import Annotated

import typer

from sparktrain._app import JOB_HELP, app, err, options, out, print_json
from sparktrain._body import read_body
from sparktrain._exits import FAILED, INTERRUPTED, OK, OUTCOME, reported
from sparktrain._help import Command
from sparktrain._outcome import ended, following, submitted
from sparktrain._pipe import CLOSED, PipeClosed, flush_stdout, silence
from sparktrain._table import jobs_table, metrics_table
from sparktrain.client import SparktrainError

__all__ = ["app", "entry", "err", "main", "out"]


@app.command(cls=Command)
def submit(
    ctx: typer.Context,
    body: Annotated[  # the text as given: a Path would make ./- (a file named -) into -, stdin
        str,
        typer.Argument(
            metavar="BODY",
            help="A POST /train body (JSON), e.g. examples/xgboost-taxi.json; one with base goes to /tune; - reads "
            "it from stdin.",
        ),
    ],
    wait: Annotated[bool, typer.Option("--wait", help="Follow the job to its end with a progress bar.")] = False,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            metavar="KEY",
            help="Sent as Idempotency-Key: the same key and body give the same job again (a retried submit queues "
            "nothing twice); another body with the key is refused (409).",
        ),
    ] = None,
) -> int:
    """Queue a training job (or a hyperparameter search: a POST /tune body)."""
    opts = options(ctx)
    request = read_body(body)
    with opts.client() as api:
        post = api.tune if "base" in request else api.train  # a /train body has no base
        return submitted(opts, api, post(request, idempotency_key=idempotency_key), wait)


@app.command(cls=Command)
def evaluate(
    ctx: typer.Context,
    body: Annotated[str, typer.Argument(metavar="BODY", help="A POST /evaluate body (JSON); - reads it from stdin.")],
    wait: Annotated[bool, typer.Option("--wait", help="Follow the job to its end.")] = False,
) -> int:
    """Queue an evaluation of a model version on a dataset; with --wait, its metrics as JSON on stdout."""
    opts = options(ctx)
    request = read_body(body)
    with opts.client() as api:
        code = submitted(opts, api, job := api.evaluate(request), wait, to=err)
        if wait and code == OK and not opts.json:
            print_json(api.job(job["id"]).get("result"))
        return code


@app.command(cls=Command)
def jobs(
    ctx: typer.Context,
    status: Annotated[
        str | None, typer.Option(metavar="STATE", help="Only jobs in this state (QUEUED, RUNNING, ...; any case).")
    ] = None,
    type_: Annotated[
        str | None, typer.Option("--type", metavar="TYPE", help="train, evaluate, predict, recipe or tune.")
    ] = None,
    name: Annotated[
        str | None, typer.Option(metavar="TEXT", help="Only jobs whose name or model name contains this (any case).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="How many of the newest to list.")] = 20,
    every: Annotated[
        bool, typer.Option("--all", help="Every job (of the filters), page by page; not with --limit.")
    ] = False,
) -> int:
    """List jobs, newest first."""
    opts = options(ctx)
    if every and getattr(ctx.get_parameter_source("limit"), "name", "") == "COMMANDLINE":
        raise typer.BadParameter("--all lists every job: give --all or --limit N, not both", param_hint="--limit")
    # The service spells states in upper case and types in lower case.
    status, type_ = (status or "").strip().upper() or None, (type_ or "").strip().lower() or None
    with opts.client() as api:
        if every:
            items = list(api.all_jobs(status=status, type=type_, name=name or None))
        else:
            items = api.jobs(status=status, type=type_, name=name or None, limit=limit)
    if opts.json:
        print_json(items)
        return OK
    if not items:
        if status or type_ or name:
            named = f" named {name!r}" if name else ""
            err.print(f"No {' '.join(filter(None, (status, type_, 'jobs')))}{named}", highlight=False)
        else:
            err.print("No jobs yet: sparktrain submit examples/xgboost-taxi.json --wait")
        return OK
    out.print(jobs_table(items, whole=not out.is_terminal))
    return OK


@app.command(cls=Command)
def show(ctx: typer.Context, job_id: Annotated[str, typer.Argument(metavar="JOB", help=JOB_HELP)]) -> int:
    """One job: state, progress, error, model and result."""
    opts = options(ctx)
    with opts.client() as api:
        job = api.job(api.job_id(job_id))
    if opts.json:
        print_json(job)
        return OK
    shown = ("id", "name", "type", "framework", "status", "progress", "progress_message", "attempt", "created_at")
    for key in (*shown, "started_at", "finished_at"):
        value = f"{100 * job[key]:.0f}%" if key == "progress" and job.get(key) is not None else job.get(key)
        value = "-" if value is None else value  # as the tables show nothing (a queued job's message, no end yet)
        out.print(f"{key:<17}{value}", highlight=False)
    if error := job.get("error"):
        out.print(f"{'error':<17}{error.get('reason')}: {error.get('message')}", highlight=False)
    for warning in job.get("warnings") or ():
        out.print(f"{'warning':<17}{warning}", highlight=False, soft_wrap=True)
    if model := job.get("model"):
        out.print(f"{'model':<17}{model.get('name')} version {model.get('version')}", highlight=False)
    if job.get("result") is not None:
        print_json(job["result"])
    return OK


@app.command(cls=Command)
def logs(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="JOB", help=JOB_HELP)],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until the job ends.")] = False,
) -> int:
    """A job's log lines; with -f, followed until the job ends (exit code: how it ended)."""
    opts = options(ctx)
    with opts.client() as api:
        job_id = api.job_id(job_id)
        lines = api.follow_logs(job_id) if follow else api.all_logs(job_id)
        with following(job_id) if follow else nullcontext():
            for line in lines:
                if opts.json:
                    sys.stdout.write(json.dumps(line, default=str) + "\n")
                else:
                    said = f"{line.get('time')} {line.get('level', ''):<7} {line['message']}"
                    out.print(said, highlight=False, markup=False)
                sys.stdout.flush()
        return OUTCOME.get(api.job(job_id)["status"], FAILED) if follow else OK


@app.command(cls=Command)
def wait(ctx: typer.Context, job_id: Annotated[str, typer.Argument(metavar="JOB", help=JOB_HELP)]) -> int:
    """Wait for a job to end without printing its logs; exit code: how it ended (0, 1 or 3).

    Nothing is printed while it runs (no progress bar); then, as submit --wait, SUCCEEDED job ... and its model on
    stdout (another end's reason on stderr); with --json, the finished job."""
    opts = options(ctx)
    with opts.client() as api:
        job_id = api.job_id(job_id)
        with following(job_id, again="wait"):
            final = api.wait(job_id)
    return ended(opts, final)


@app.command(cls=Command)
def metrics(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="JOB", help=JOB_HELP)],
    key: Annotated[
        str | None, typer.Option(metavar="KEY", help="Only this metric (loss, validation_mae, ...).")
    ] = None,
) -> int:
    """A job's metric points so far, in step order: key, step, epoch, value, worker (--json: every field)."""
    opts = options(ctx)
    with opts.client() as api:
        job_id = api.job_id(job_id)
        points = api.metrics(job_id, key=key)
        finished = not points and not opts.json and api.job(job_id)["status"] in OUTCOME  # none to come: no "yet"
    if opts.json:
        print_json(points)
        return OK
    if not points:
        later = "" if finished else " (yet)"
        err.print(f"No {key + ' ' if key else ''}metrics for job {job_id}{later}", highlight=False)
        return OK
    out.print(metrics_table(points))
    return OK


@app.command(cls=Command)
def cancel(ctx: typer.Context, job_id: Annotated[str, typer.Argument(metavar="JOB", help=JOB_HELP)]) -> int:
    """Cancel a job: a queued one ends CANCELLED, a running one goes CANCELLING; one that SUCCEEDED or FAILED is
    refused (exit 2), and a cancelled one stays so (exit 0)."""
    opts = options(ctx)
    with opts.client() as api:
        job = api.cancel(api.job_id(job_id))
    print_json(job) if opts.json else out.print(f"{job['status']} job {job['id']}", highlight=False)
    return OK


from sparktrain import _model_commands  # noqa: E402, F401  (registers models, alias, ...: listed after the above)


class _InterruptOnce:
    """Ctrl-C: a KeyboardInterrupt, once. A second Ctrl-C while the first is handled (its "interrupted" line being
    printed) is ignored: it made a traceback. The main thread blocks SIGINT from then on and the handler stays, and
    returns: setting SIG_IGN races with a signal already on its way ("Signal 2 ignored due to race condition"), and
    at exit Python's own SIG_DFL would end the process by the signal instead of exit 130."""

    def __init__(self) -> None:
        self.interrupted = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.interrupted:
            return
        self.interrupted = True
        if hasattr(signal, "pthread_sigmask"):  # not on Windows
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        raise KeyboardInterrupt


def main(argv: list[str] | None = None, *, whole_process: bool = False) -> int:
    """The console script: runs a command and turns what went wrong into an exit code. Called in a process that goes
    on (``whole_process`` false: tests, scripts), it leaves Ctrl-C as it found it."""
    before = signal.getsignal(signal.SIGINT)
    if before is signal.default_int_handler:  # not where SIGINT is ignored (started with &)
        signal.signal(signal.SIGINT, _InterruptOnce())
    try:
        return _run(argv)
    finally:
        if not whole_process and before is signal.default_int_handler:
            signal.signal(signal.SIGINT, before)
            if hasattr(signal, "pthread_sigmask"):
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _run(argv: list[str] | None) -> int:
    try:
        try:
            code = app(args=argv, prog_name="sparktrain", standalone_mode=False)
        except typer.Exit as exc:  # typer's: Ctrl-C elsewhere is Exit(130)
            code = exc.exit_code
            if code == INTERRUPTED:
                err.print("interrupted", highlight=False)
        except (typer.Abort, typer.TyperException, SparktrainError) as exc:
            code = reported(exc, err)
        flush_stdout()  # what is still buffered, while a closed pipe is still exit 141
    except PipeClosed:  # nothing more to say, and no one to say it to
        silence()
        code = CLOSED
    return int(code or 0)


def entry() -> None:
    sys.exit(main(whole_process=True))


if __name__ == "__main__":
    entry()
