"""The ``sparktrain`` command group, its global options and its output: what every command module shares
(:mod:`sparktrain.cli` has the job commands, :mod:`sparktrain._model_commands` the registry's)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from sparktrain._help import Group, print_version
from sparktrain._pipe import Output
from sparktrain.client import Client

JOB_HELP = "A job id, or the first 6 or more characters of one."

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
    key_from: str = "--api-key"

    def client(self) -> Client:
        return Client(self.url, self.api_key, url_from=self.url_from, key_from=self.key_from)


def options(ctx: typer.Context) -> Options:
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
    def source(name: str, option: str, variable: str, default: str) -> str:
        given = getattr(ctx.get_parameter_source(name), "name", "")  # typer's own click's ParameterSource
        return {"COMMANDLINE": option, "ENVIRONMENT": variable}.get(given, default)

    ctx.obj = Options(
        url=url,
        api_key=api_key,
        json=json_output,
        url_from=source("url", "--url", "SPARKTRAIN_URL", "the default URL"),
        key_from=source("api_key", "--api-key", "SPARKTRAIN_API_KEY", "SPARKTRAIN_API_KEY"),
    )


def print_json(value: Any) -> None:
    """Written now, not at exit: a reader gone is found here, where it ends the command with 141 (see _pipe)."""
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
    sys.stdout.flush()
