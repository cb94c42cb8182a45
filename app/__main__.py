"""``python -m app [--host H] [--port P]``: start the driver process (API + in-process job consumer)."""

from __future__ import annotations

import argparse

import uvicorn

from app.core.logging import configure_logging
from app.core.settings import load_settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app", description="Start the sparktrain driver process.")
    parser.add_argument("--host", help="interface to listen on (default SPARKTRAIN_HOST or 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default SPARKTRAIN_PORT or 8000)")
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in {"host": args.host, "port": args.port}.items() if v is not None}
    settings = load_settings(**overrides)
    configure_logging(level=settings.log_level, fmt=settings.log_format)

    from app.main import create_app

    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        # JSON lines: uvicorn's loggers go to the root handler too; text keeps uvicorn's own format.
        log_config=None if settings.log_format == "json" else uvicorn.config.LOGGING_CONFIG,
        timeout_graceful_shutdown=30,
    )


if __name__ == "__main__":
    main()
