"""Tuning jobs (``POST /tune``): a search over a ``/train`` body whose trials are child training jobs."""
