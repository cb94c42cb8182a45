"""The registry's commands: ``models``, ``alias``, ``datasets``, ``download`` and ``predict`` (docs/cli.md).
:mod:`sparktrain.cli` imports this module after its own commands, so ``--help`` lists these after them."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated, Any

import typer

from sparktrain._app import app, err, options, out, print_json
from sparktrain._csv import CellError, at_lines, is_stdin, model_columns, read_records, source_name, typed_rows
from sparktrain._exits import OK
from sparktrain._help import Command
from sparktrain._outcome import submitted
from sparktrain._table import datasets_table, models_table
from sparktrain.client import ApiError, LocalFileError, ModelRef, UsageError

INLINE_ROWS = 10_000
"""Rows ``predict --csv`` sends inline; more become a batch job (the service's SPARKTRAIN_MAX_PREDICT_ROWS default)."""


@app.command(cls=Command)
def models(ctx: typer.Context) -> int:
    """Registered models: their versions, aliases and framework."""
    opts = options(ctx)
    with opts.client() as api:
        items = api.models()
    if opts.json:
        print_json(items)
        return OK
    if not items:
        err.print("No models yet: a training job that succeeds registers one.")
        return OK
    out.print(models_table(items, whole=not out.is_terminal))
    return OK


@app.command(cls=Command)
def alias(
    ctx: typer.Context,
    model: Annotated[
        str, typer.Argument(metavar="MODEL", help="NAME:VERSION, the version the alias names; with --delete, NAME.")
    ],
    name: Annotated[str, typer.Argument(metavar="ALIAS", help="The alias: champion, production, ...")],
    delete: Annotated[bool, typer.Option("--delete", help="Remove the alias from the model instead.")] = False,
) -> int:
    """Point a model's alias at a version (NAME@ALIAS then names it in predict, download and evaluate bodies), or
    remove one with --delete."""
    opts = options(ctx)
    ref = _model_ref(model)
    if ref.alias is not None or (ref.version is None) != delete:
        shape = "NAME (the model whose alias goes)" if delete else "NAME:VERSION (the version the alias names)"
        raise typer.BadParameter(f"{model!r}: give {shape}", param_hint="MODEL")
    with opts.client() as api:
        if delete:
            api.delete_alias(ref.name, name)
            answer: dict[str, Any] = {"name": ref.name, "alias": name, "deleted": True}
            said = f"alias {name} of {ref.name} removed"
        else:
            answer = api.set_alias(ref.name, name, int(ref.version or 0))
            said = f"alias {name} of {ref.name} names version {answer['version']}"
    print_json(answer) if opts.json else out.print(said, highlight=False)
    return OK


@app.command(cls=Command)
def datasets(ctx: typer.Context) -> int:
    """Registered datasets, newest first: id, name, format, rows, created, URI."""
    opts = options(ctx)
    with opts.client() as api:
        items = api.datasets()
    if opts.json:
        print_json(items)
        return OK
    if not items:
        err.print("No datasets yet: POST /datasets registers one (its id can be a training body's dataset.uri).")
        return OK
    out.print(datasets_table(items, whole=not out.is_terminal))
    return OK


class Format(enum.StrEnum):
    """What ``GET /models/{name}/versions/{v}/artifact?format=`` downloads."""

    archive = "archive"
    mlflow = "mlflow"
    onnx = "onnx"


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
    fmt: Annotated[
        Format,
        typer.Option("--format", help="archive (.tar.gz), or mlflow or onnx (a .zip): docs/models-elsewhere.md."),
    ] = Format.archive,
) -> int:
    """Download a model version: its archive (it loads without sparktrain), an MLflow model or ONNX."""
    opts = options(ctx)
    ref = _model_ref(model)
    with opts.client() as api:
        path = api.download(ref, output, fmt=fmt.value)
    print_json({"path": str(path)}) if opts.json else out.print(str(path), highlight=False)
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
    executors (the file must then be inside the service's data roots, and --key names its id column). A cell of an
    array column (the digits model's pixels) is a JSON array, quoted: "[0, 1.5, 3]"."""
    opts = options(ctx)
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
            try:
                values = typed_rows(columns, text, {spec["name"]: spec.get("type", "") for spec in specs})
            except CellError as exc:
                raise LocalFileError(f"{name} line {lines[exc.row]}: {exc}") from exc
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
                print_json(answer)
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
        return submitted(opts, api, api.predict(body), wait)


def _plain(prediction: Any) -> str:
    """A prediction on one line: a class label as written (cheap), anything else as JSON (numbers, lists)."""
    if isinstance(prediction, str) and prediction and prediction.isprintable():
        return prediction
    return json.dumps(prediction)
