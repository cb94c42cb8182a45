"""``sparktrain``: the service from a terminal (docs/cli.md).

Exit codes: 0 the job succeeded (or the command did what it was asked), 1 the job failed, 2 a usage error (a local
file that cannot be read or written too) or a request the service refused (4xx), 3 the job was cancelled, 4 the
service is unreachable (no answer, 502/503/504), 141 stdout's reader went away (``| head``).
The service's address and key come from ``--url``/``--api-key`` or ``SPARKTRAIN_URL``/``SPARKTRAIN_API_KEY``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from sparktrain._csv import at_lines, is_stdin, model_columns, read_records, source_name, typed_rows
from sparktrain._exits import FAILED, INTERRUPTED, OK, OUTCOME, reported
from sparktrain._help import Command, Group, print_version
from sparktrain._pipe import CLOSED, Output, PipeClosed, flush_stdout, silence
from sparktrain._progress import Live
from sparktrain._table import jobs_table
from sparktrain.client import ApiError, Client, LocalFileError, ModelRef, SparktrainError, UsageError
from sparktrain.errors import Interrupted, Unreachable

JOB_HELP = "A job id, or the first 6 or more characters of one."
INLINE_ROWS = 10_000
"""Rows ``predict --csv`` sends inline; more become a batch job (the service's SPARKTRAIN_MAX_PREDICT_ROWS default)."""

app = typer.Typer(
    name="sparktrain",
    help="Train, follow and use models on a sparktrain service (SPARKTRAIN_URL, SPARKTRAIN_API_KEY).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=Group,
)
# No console markup: job names, log lines and messages come from users and the server, and a "[/x]" in one must
# print as written, not fail (rich parses markup in every printed string and table cell unless told not to).
out = Output(soft_wrap=True, markup=False, width=None if sys.stdout.isatty() else 100_000)  # piped: values whole
err = Output(stderr=True, soft_wrap=True, markup=False)


@dataclass
class Options:
    url: str | None
    api_key: str | None
    json: bool
    url_from: str = "--url"

    def client(self) -> Client:
        return Client(self.url, self.api_key, url_from=self.url_from)


def _options(ctx: typer.Context) -> Options:
    assert isinstance(ctx.obj, Options)
    return ctx.obj


@app.callback()
def _main(
    ctx: typer.Context,
    url: Annotated[
        str | None,
        typer.Option(envvar="SPARKTRAIN_URL", metavar="URL", help="The service (default http://127.0.0.1:8000)."),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="SPARKTRAIN_API_KEY",
            metavar="KEY",
            help="An API key, when the service has them.",
            show_default=False,
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Machine-readable JSON on stdout, no progress bar.")
    ] = False,
    _version: Annotated[
        bool, typer.Option("--version", callback=print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    source = getattr(ctx.get_parameter_source("url"), "name", "")  # typer's own click's ParameterSource
    url_from = {"COMMANDLINE": "--url", "ENVIRONMENT": "SPARKTRAIN_URL"}.get(source, "the default URL")
    ctx.obj = Options(url=url, api_key=api_key, json=json_output, url_from=url_from)


def _print_json(value: Any) -> None:
    """Written now, not at exit: a reader gone is found here, where it ends the command with 141 (see _pipe)."""
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
    sys.stdout.flush()


def _read_body(path: Path) -> dict[str, Any]:
    try:
        body = json.loads(path.read_text())
    except OSError as exc:
        raise LocalFileError(f"{path}: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise LocalFileError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise LocalFileError(f"{path}: the body must be a JSON object")
    return body


@contextmanager
def _following(job_id: str) -> Iterator[None]:
    """Ctrl-C, or the service lost while following a job: say that the job goes on and how to follow it again."""
    again = f"follow it again with: sparktrain logs -f {job_id}"
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: job {job_id} goes on in the service; {again}") from None
    except Unreachable as exc:
        raise Unreachable(f"{exc}; job {job_id} goes on where the service runs: {again}") from None


def _follow(opts: Options, api: Client, job: dict[str, Any], to: Console) -> int:
    """Wait for the job with a live progress bar (none with --json); report how it ended (on ``to``); its exit
    code."""
    if opts.json:
        with _following(job["id"]):
            final = api.wait(job["id"])
        _print_json(final)
        if final["status"] != "SUCCEEDED":  # the exit code's reason, on stderr as without --json
            error = final.get("error") or {}
            err.print(f"{final['status']} job {final['id']}: {error.get('reason')}: {error.get('message')}")
        return OUTCOME.get(final["status"], FAILED)
    with _following(job["id"]):
        final = Live(err).follow(api, job)
    return _report(final, to)


def _warned(job: dict[str, Any]) -> None:
    """The job's warnings (the request's and the run's), on stderr."""
    for warning in job.get("warnings") or ():
        err.print(f"warning: {warning}", highlight=False, soft_wrap=True)


def _report(job: dict[str, Any], to: Console) -> int:
    _warned(job)
    status = job["status"]
    if status == "SUCCEEDED":
        to.print(f"SUCCEEDED job {job['id']}", highlight=False)
        if job.get("model"):
            to.print(f"model {job['model']['name']} version {job['model']['version']}", highlight=False)
        result = job.get("result") or {}
        validation = result.get("validation")
        if isinstance(validation, dict):
            shown = ", ".join(f"{k} {v:.4g}" for k, v in validation.items() if isinstance(v, int | float))
            to.print(f"validation: {shown}", highlight=False)
        if result.get("output_uri"):  # a batch prediction's parquet output
            counts = [f"{result['rows']} rows"] if isinstance(result.get("rows"), int) else []
            if result.get("bad_rows"):
                counts.append(f"{result['bad_rows']} bad rows dropped")
            to.print(f"output {result['output_uri']}" + (f" ({', '.join(counts)})" if counts else ""), highlight=False)
        return OK
    error = job.get("error") or {}
    err.print(f"{status} job {job['id']}: {error.get('reason', '?')}: {error.get('message', '')}", highlight=False)
    return OUTCOME.get(status, FAILED)


def _submitted(opts: Options, api: Client, job: dict[str, Any], wait: bool, to: Console = out) -> int:
    """Say what was queued; with ``wait``, follow it (its end reported on ``to``); the exit code."""
    if not wait:
        if opts.json:
            _print_json(job)
        else:
            out.print(f"{job['status']} job {job['id']}  (follow it: sparktrain logs -f {job['id']})", highlight=False)
            _warned(job)
        return OK
    if not opts.json:
        err.print(f"job {job['id']} queued; following it (Ctrl-C stops following, not the job)", highlight=False)
    return _follow(opts, api, job, to)


@app.command(cls=Command)
def submit(
    ctx: typer.Context,
    body: Annotated[
        Path,
        typer.Argument(
            metavar="BODY",
            help="A POST /train body (JSON), e.g. examples/xgboost-taxi.json; one with base goes to /tune.",
        ),
    ],
    wait: Annotated[bool, typer.Option("--wait", help="Follow the job to its end with a progress bar.")] = False,
) -> int:
    """Queue a training job (or a hyperparameter search: a POST /tune body)."""
    opts = _options(ctx)
    request = _read_body(body)
    with opts.client() as api:
        job = api.tune(request) if "base" in request else api.train(request)  # a /train body has no base
        return _submitted(opts, api, job, wait)


@app.command(cls=Command)
def evaluate(
    ctx: typer.Context,
    body: Annotated[Path, typer.Argument(metavar="BODY", help="A POST /evaluate body (JSON).")],
    wait: Annotated[bool, typer.Option("--wait", help="Follow the job to its end.")] = False,
) -> int:
    """Queue an evaluation of a model version on a dataset; with --wait, its metrics as JSON on stdout."""
    opts = _options(ctx)
    with opts.client() as api:
        code = _submitted(opts, api, job := api.evaluate(_read_body(body)), wait, to=err)
        if wait and code == OK and not opts.json:
            _print_json(api.job(job["id"])["result"])
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
    limit: Annotated[int, typer.Option(min=1, max=500)] = 20,
) -> int:
    """List jobs, newest first."""
    opts = _options(ctx)
    # The service spells states in upper case and types in lower case.
    status, type_ = (status or "").strip().upper() or None, (type_ or "").strip().lower() or None
    with opts.client() as api:
        items = api.jobs(status=status, type=type_, name=name or None, limit=limit)
    if opts.json:
        _print_json(items)
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
    opts = _options(ctx)
    with opts.client() as api:
        job = api.job(api.job_id(job_id))
    if opts.json:
        _print_json(job)
        return OK
    shown = ("id", "name", "type", "framework", "status", "progress", "progress_message", "attempt", "created_at")
    for key in (*shown, "started_at", "finished_at"):
        value = f"{100 * job[key]:.0f}%" if key == "progress" and job.get(key) is not None else job.get(key)
        out.print(f"{key:<17}{value}", highlight=False)
    if job.get("error"):
        out.print(f"{'error':<17}{job['error']['reason']}: {job['error']['message']}", highlight=False)
    for warning in job.get("warnings") or ():
        out.print(f"{'warning':<17}{warning}", highlight=False, soft_wrap=True)
    if job.get("model"):
        out.print(f"{'model':<17}{job['model']['name']} version {job['model']['version']}", highlight=False)
    if job.get("result") is not None:
        _print_json(job["result"])
    return OK


@app.command(cls=Command)
def logs(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="JOB", help=JOB_HELP)],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until the job ends.")] = False,
) -> int:
    """A job's log lines; with -f, followed until the job ends (exit code: how it ended)."""
    opts = _options(ctx)
    with opts.client() as api:
        job_id = api.job_id(job_id)
        lines = api.follow_logs(job_id) if follow else api.all_logs(job_id)
        with _following(job_id) if follow else nullcontext():
            for line in lines:
                if opts.json:
                    sys.stdout.write(json.dumps(line, default=str) + "\n")
                else:
                    out.print(f"{line['time']} {line['level']:<7} {line['message']}", highlight=False, markup=False)
                sys.stdout.flush()
        return OUTCOME.get(api.job(job_id)["status"], FAILED) if follow else OK


@app.command(cls=Command)
def cancel(ctx: typer.Context, job_id: Annotated[str, typer.Argument(metavar="JOB", help=JOB_HELP)]) -> int:
    """Cancel a job: a queued one ends CANCELLED, a running one goes CANCELLING; one that SUCCEEDED or FAILED is
    refused (exit 2), and a cancelled one stays so (exit 0)."""
    opts = _options(ctx)
    with opts.client() as api:
        job = api.cancel(api.job_id(job_id))
    _print_json(job) if opts.json else out.print(f"{job['status']} job {job['id']}", highlight=False)
    return OK


@app.command(cls=Command)
def models(ctx: typer.Context) -> int:
    """Registered models: their versions, aliases and framework."""
    opts = _options(ctx)
    with opts.client() as api:
        items = api.models()
    if opts.json:
        _print_json(items)
        return OK
    if not items:
        err.print("No models yet: a training job that succeeds registers one.")
        return OK
    table = Table("name", "versions", "latest", "aliases", "framework")
    for m in items:
        latest = m["versions"][-1] if m["versions"] else {}
        aliases = ", ".join(f"{a}→v{v}" for a, v in m["aliases"].items())
        table.add_row(
            m["name"], str(len(m["versions"])), str(m["latest_version"]), aliases, latest.get("framework", "")
        )
    out.print(table)
    return OK


@app.command(cls=Command)
def download(
    ctx: typer.Context,
    model: Annotated[str, typer.Argument(metavar="MODEL", help="NAME, NAME:VERSION or NAME@ALIAS.")],
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            metavar="PATH",
            help="A file (its folder must exist), or a folder (created when it ends with /) for NAME-vN.tar.gz; "
            "not - (stdout).",
        ),
    ] = None,
) -> int:
    """Download a model version's archive (it loads without sparktrain: docs/models-elsewhere.md)."""
    opts = _options(ctx)
    ref = _model_ref(model)
    with opts.client() as api:
        path = api.download(ref, output)
    _print_json({"path": str(path)}) if opts.json else out.print(str(path), highlight=False)
    return OK


def _model_ref(text: str) -> ModelRef:
    try:
        return ModelRef.parse(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="MODEL") from exc


@app.command(cls=Command)
def predict(
    ctx: typer.Context,
    model: Annotated[str, typer.Argument(metavar="MODEL", help="NAME, NAME:VERSION or NAME@ALIAS.")],
    csv_file: Annotated[  # the text as given: a Path would make ./- (a file named -) into -, stdin
        str,
        typer.Option("--csv", metavar="FILE", help="Rows to predict, with a header line; - reads stdin (./-: a file)."),
    ],
    key: Annotated[
        str | None, typer.Option(metavar="COLUMN", help="Batch: the id column kept next to each prediction.")
    ] = None,
    output_uri: Annotated[str | None, typer.Option(metavar="URI", help="Batch: where the parquet output goes.")] = None,
    max_inline: Annotated[
        int, typer.Option(min=0, metavar="N", help="More rows than this run as a batch job (0: always one).")
    ] = INLINE_ROWS,
    wait: Annotated[bool, typer.Option("--wait", help="Batch: follow the job to its end.")] = False,
) -> int:
    """Predictions for a CSV file: answered at once for up to --max-inline rows, else as a batch job on the
    executors (the file must then be inside the service's data roots, and --key names its id column)."""
    opts = _options(ctx)
    ref = _model_ref(model)
    name = source_name(csv_file)
    try:
        columns, rows, lines = read_records(csv_file)
    except ValueError as exc:
        raise LocalFileError(str(exc)) from exc
    if len(rows) > max_inline and is_stdin(csv_file):
        raise UsageError(
            f"{len(rows)} rows from stdin are more than --max-inline {max_inline}: a batch job reads a file the "
            "service can read, not stdin; give --csv FILE (inside the service's data roots), or a larger --max-inline"
        )
    with opts.client() as api:
        if len(rows) <= max_inline:
            specs = [spec for spec in api.signature(ref)["inputs"] if spec.get("name")]
            columns, text, dropped = model_columns(columns, rows, [spec["name"] for spec in specs])
            values = typed_rows(columns, text, {spec["name"]: spec.get("type", "") for spec in specs})
            if dropped:
                err.print(f"not sent (the model does not take them): {', '.join(dropped)}", highlight=False)
                if missing := [s["name"] for s in specs if s.get("required", True) and s["name"] not in columns]:
                    err.print(f"{name} has no column {', '.join(missing)}, which the model takes: is one of "
                              f"{', '.join(dropped)} misspelt?", highlight=False)  # fmt: skip
            try:
                answer = api.predict({"model": ref.selector(), "dataframe_split": {"columns": columns, "data": values}})
            except ApiError as exc:  # the rows it names, as the file's lines
                raise ApiError(exc.status, at_lines(exc.problem, name, lines)) from exc
            if opts.json:
                _print_json(answer)
            else:
                for prediction in answer["predictions"]:
                    out.print(_plain(prediction), highlight=False)
            return OK
        if key is None:
            raise typer.BadParameter(f"{len(rows)} rows go to a batch job, which needs --key (the file's id column)")
        body: dict[str, Any] = {
            "model": ref.selector(),
            "dataset": {"uri": str(Path(csv_file).resolve()), "format": "csv", "key": key},
        }
        if output_uri:
            body["output_uri"] = output_uri
        return _submitted(opts, api, api.predict(body), wait)


def _plain(prediction: Any) -> str:
    """A prediction on one line: a class label as written (cheap), anything else as JSON (numbers, lists)."""
    if isinstance(prediction, str) and prediction and prediction.isprintable():
        return prediction
    return json.dumps(prediction)


def main(argv: list[str] | None = None) -> int:
    """The console script: runs a command and turns what went wrong into an exit code."""
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
    sys.exit(main())


if __name__ == "__main__":
    entry()
