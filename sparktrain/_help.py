"""The command group and its commands. How ``sparktrain --help`` names things: a flag shows no value (``--json``, not
``--json <bool>``) and a positional argument reads as its upper-case name in the usage line (``download [OPTIONS]
MODEL``, not ``{model}``), as docs/cli.md writes them. A closed stdout ends a command as :mod:`sparktrain._pipe`
says."""

from __future__ import annotations

import sys
from typing import Any

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from sparktrain._pipe import PipeClosed, pipe_closed


def _flags_without_values(params: list[Any]) -> list[Any]:
    for param in params:
        if isinstance(param, TyperOption) and param.is_bool_flag and param.metavar is None:
            param.metavar = ""  # the rich help prints a metavar in place of the type, here nothing
    return params


def _usage_name(argument: TyperArgument) -> str:
    name = argument.metavar or (argument.name or "").upper()
    if argument.nargs != 1:
        name += "..."
    return name if argument.required else f"[{name}]"


class Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_without_values(super().get_params(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if isinstance(param, TyperArgument):
                pieces.append(_usage_name(param))
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


class Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_without_values(super().get_params(ctx))

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:  # a print to a pipe whose reader went away: not click's exit 1
            raise PipeClosed from exc

    def main(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().main(*args, **kwargs)
        except SystemExit as exc:  # --help or --version into a closed pipe: click's (or rich's) exit 1
            if pipe_closed(exc):
                raise PipeClosed from exc
            raise


def print_version(value: bool) -> None:
    """``--version``: this client's version, as the installed package gives it, then exit."""
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("sparktrain")
        except PackageNotFoundError:
            installed = "unknown (not installed as a package)"
        sys.stdout.write(f"sparktrain {installed}\n")
        raise typer.Exit()
