"""The sparktrain CLI and its Python client."""
