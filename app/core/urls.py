"""Checks of the settings' URLs and directories that need more than a pattern (app/core/settings.py)."""

from __future__ import annotations

from pathlib import Path


def check_database_url(url: str) -> None:
    """A ValueError saying what is wrong with ``SPARKTRAIN_DATABASE_URL`` (never repeating it: it may hold a
    password)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    what = "SPARKTRAIN_DATABASE_URL must be a SQLAlchemy URL, e.g. postgresql+psycopg://user@host/db or sqlite:///path"
    try:
        make_url(url).get_dialect()
    except NoSuchModuleError:  # before ArgumentError, its base class
        raise ValueError(f"{what}; SQLAlchemy knows no such dialect") from None
    except (ArgumentError, ValueError):
        raise ValueError(f"{what}; it does not parse") from None


def holds(a: Path, b: Path) -> bool:
    """Whether resolved directory ``a`` is, or holds, ``b``."""
    return a == b or a in b.parents


def overlap(a: Path, b: Path) -> bool:
    """Whether one of two resolved directories is, or holds, the other."""
    return holds(a, b) or holds(b, a)


def check_broker_url(url: str) -> None:
    """A ValueError saying what is wrong with ``SPARKTRAIN_BROKER_URL`` (never repeating it)."""
    from kombu.transport import TRANSPORT_ALIASES
    from kombu.utils.url import url_to_parts

    what = "SPARKTRAIN_BROKER_URL must be a Celery broker URL, e.g. redis://host:6379/0"
    try:
        scheme = url_to_parts(url).scheme if "://" in url else ""
    except ValueError:  # a port that is not a number
        raise ValueError(f"{what}; it does not parse") from None
    if scheme.split("+")[0] not in TRANSPORT_ALIASES:
        raise ValueError(f"{what}; kombu has no transport {scheme!r}" if scheme else f"{what}; it has no scheme://")
    from kombu.utils.url import parse_url

    try:  # kombu reads the query's parameters beside the URL's parts: ?password= beside the user part's
        parse_url(url)
    except TypeError:  # dict() got multiple values for keyword argument 'password' (not shown: it may be one)
        raise ValueError(
            f"{what}; a query parameter repeats a part of the URL (password, userid, hostname, port, virtual_host or "
            "transport): kombu takes those from the URL itself, e.g. redis://:PASSWORD@host:6379/0"
        ) from None
