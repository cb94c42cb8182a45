"""``python -m sparktrain``: the CLI."""

from sparktrain.cli import entry

entry()
