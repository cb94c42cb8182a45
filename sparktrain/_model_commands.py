"""The registry's commands: ``models`` (and ``models delete``, ``tag``, ``untag``), ``alias``, ``datasets``,
``download`` and ``predict`` (docs/cli.md).
:mod:`sparktrain.cli` imports this module after its own commands, so ``--help`` lists these after them."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer

from sparktrain._app import app, err, options, out, print_json
from sparktrain._csv import CellError, at_lines, is_stdin, model_columns, read_records, source_name, typed_rows
from sparktrain._exits import OK
from sparktrain._help import Command, Group
from sparktrain._outcome import submitted
from sparktrain._refs import MODEL_NAME, NAME_RULE
from sparktrain._table import datasets_table, models_table
from sparktrain.client import ApiError, LocalFileError, ModelRef, UsageError

INLINE_ROWS = 10_000
"""Rows ``predict --csv`` sends inline; more become a batch job (the service's SPARKTRAIN_MAX_PREDICT_ROWS default)."""


models_app = typer.Typer(
    cls=Group,
    no_args_is_help=False,
    help="Registered models: their versions, aliases and framework (with no command); delete, tag and untag.",
)
app.add_typer(models_app, name="models")


@models_app.callback(invoke_without_command=True)
def models(ctx: typer.Context) -> int | None:
    """Registered models: their versions, aliases and framework; or one of the commands below."""
    if ctx.invoked_subcommand is not None:
        return None
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


VersionOption = Annotated[
    int | None, typer.Option("--version", min=1, metavar="N", help="The version (else: the model itself).")
]


@models_app.command("delete", cls=Command)
def delete_model(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The model.")],
    version: VersionOption = None,
) -> int:
    """Delete a model version (--version N), or the whole model with every version, alias and tag. Asks nothing:
    a job that still uses it makes the service refuse (409, exit 2); a deleted number is never given again."""
    opts = options(ctx)
    _model_path(name)  # a name no model can have: exit 2 before any request, with the --version hint
    with opts.client() as api:
        api.delete_model(name) if version is None else api.delete_version(name, version)
    said = f"model {name} version {version} deleted" if version is not None else f"model {name} deleted"
    answer = {"name": name, "version": version, "deleted": True}
    print_json(answer) if opts.json else out.print(said, highlight=False)
    return OK


@models_app.command("tag", cls=Command)
def tag(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The model.")],
    key: Annotated[str, typer.Argument(metavar="KEY", help="The tag's key: letters, digits, _ . - and spaces.")],
    value: Annotated[str, typer.Argument(metavar="VALUE", help="The tag's value (any text; '' is a value too).")],
    version: VersionOption = None,
) -> int:
    """Set a tag on a model, or on one of its versions (--version N): created, or its value replaced."""
    opts = options(ctx)
    _tag_path(name, version, key)  # a key that cannot travel: exit 2 before any request
    with opts.client() as api:
        answer = api.tag(name, key, value, version=version)
    where = f"{name} version {version}" if version is not None else name
    print_json(answer) if opts.json else out.print(f"tag {key} of {where} set", highlight=False)
    return OK


@models_app.command("untag", cls=Command)
def untag(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(metavar="NAME", help="The model.")],
    key: Annotated[str, typer.Argument(metavar="KEY", help="The tag's key.")],
    version: VersionOption = None,
) -> int:
    """Remove a tag from a model, or from one of its versions (--version N); one it does not have is exit 2."""
    opts = options(ctx)
    _tag_path(name, version, key)  # '..' would reach DELETE /models/NAME: exit 2 before any request
    with opts.client() as api:
        api.untag(name, key, version=version)
    where = f"{name} version {version}" if version is not None else name
    answer = {"name": name, "version": version, "key": key, "deleted": True}
    print_json(answer) if opts.json else out.print(f"tag {key} of {where} removed", highlight=False)
    return OK


def _model_path(name: str) -> str:
    """``/models/{name}``; a name no model can have (``foo/bar``, ``m:3``) is a usage error with the rule."""
    if not MODEL_NAME.match(name):
        hint = " (a version is --version N)" if ":" in name or "@" in name else ""
        raise UsageError(f"no model is named {name!r}: {NAME_RULE}{hint}")
    return f"/models/{_quoted(name)}"


def _tag_path(name: str, version: int | None, key: str) -> str:
    versioned = f"/versions/{version}" if version is not None else ""
    return f"{_model_path(name)}{versioned}/tags/{_segment(key, 'KEY', 'a tag key')}"


def _segment(text: str, param: str, what: str) -> str:
    """``text`` as one path segment. Empty, or only dots, is a usage error (exit 2) before any request: HTTP clients
    remove ``.`` and ``..`` segments from a URL, so ``DELETE /models/m/tags/..`` would be sent as
    ``DELETE /models/m`` and delete the model."""
    if not text.strip("."):
        raise typer.BadParameter(f"{text!r} is not {what}: it cannot be empty or only dots", param_hint=param)
    return _quoted(text)


def _quoted(text: str) -> str:
    """Every character but letters, digits and ``_.-~`` percent-encoded, and a segment of dots alone as ``%2E``s, so
    that no segment can be normalized away."""
    quoted = quote(text, safe="")
    return quoted.replace(".", "%2E") if not quoted.strip(".") else quoted


@app.command(cls=Command)
def alias(
    ctx: typer.Context,
    model: Annotated[
        str,
        typer.Argument(
            metavar="MODEL",
            help="NAME:VERSION, the version the alias names; NAME alone shows the version it names (or, with "
            "--delete, removes it).",
        ),
    ],
    name: Annotated[str, typer.Argument(metavar="ALIAS", help="The alias: champion, production, ...")],
    delete: Annotated[bool, typer.Option("--delete", help="Remove the alias from the model instead.")] = False,
) -> int:
    """Point a model's alias at a version (NAME@ALIAS then names it in predict, download and evaluate bodies), show
    the version an alias names (NAME ALIAS), or remove one with --delete."""
    opts = options(ctx)
    ref = _model_ref(model)
    if ref.alias is not None or (delete and ref.version is not None):
        shape = "NAME (the model whose alias goes)" if delete else "NAME:VERSION (the version the alias names) or NAME"
        raise typer.BadParameter(f"{model!r}: give {shape}", param_hint="MODEL")
    _segment(name, "ALIAS", "an alias (it starts with a letter)")  # before any request: never '..'
    with opts.client() as api:
        if delete:
            api.delete_alias(ref.name, name)
            answer: dict[str, Any] = {"name": ref.name, "alias": name, "deleted": True}
            said = f"alias {name} of {ref.name} removed"
        elif ref.version is None:
            _model_path(ref.name)
            answer = api.alias(ref.name, name)
            said = f"alias {name} of {ref.name} names version {answer.get('version')}"
        else:
            answer = api.set_alias(ref.name, name, int(ref.version))
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
