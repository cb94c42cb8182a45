"""The web console at ``/ui``: pages for jobs, one job, a comparison, models and the cluster (docs/console.md)."""

from app.ui.routes import install_console

__all__ = ["install_console"]
