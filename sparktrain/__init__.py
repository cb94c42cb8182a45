"""The sparktrain CLI and its Python client (:class:`sparktrain.client.Client`; docs/python.md)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sparktrain")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
