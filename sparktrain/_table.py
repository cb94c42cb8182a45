"""The tables the CLI prints (jobs, models, datasets, metrics): plain columns, one row a line, so that a pipe into
``awk`` or ``grep`` reads them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.table import Table


def jobs_table(items: list[dict[str, Any]], *, whole: bool) -> Table:
    """Ids and states are printed whole at any width (an id is copied from here into show, logs and cancel); the
    name (at most 32 columns), type and time are cut (…) first on a narrow terminal, and nothing is cut when the
    output is piped. Plain columns: ``awk '{print $1}'`` reads the ids."""
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
    table.add_column("id", no_wrap=True, min_width=max(len(j["id"]) for j in items))
    cap = None if whole else 32  # piped: every value whole, for grep and awk
    table.add_column("name", no_wrap=True, overflow="ellipsis", max_width=cap)
    table.add_column("type", no_wrap=True, overflow="ellipsis")
    table.add_column("status", no_wrap=True, min_width=max(len(j["status"]) for j in items))
    table.add_column("progress", no_wrap=True, justify="right", min_width=len("progress"))
    table.add_column("created", no_wrap=True, overflow="ellipsis")
    for j in items:
        kind = j["type"] + (f"/{j['framework']}" if j.get("framework") else "")
        progress = f"{100 * j['progress']:.0f}%"
        table.add_row(j["id"], j.get("name") or "", kind, j["status"], progress, to_the_minute(j["created_at"]))
    return table


def to_the_minute(text: str) -> str:
    """An ISO 8601 time to the minute, in UTC: ``2024-05-01T12:34Z`` (as given when it is not one)."""
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return str(text)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%MZ") if moment.tzinfo else moment.strftime("%Y-%m-%dT%H:%M")


def _plain() -> Table:
    """A table as ``jobs`` prints one: no box, one row a line, columns a space apart (``awk`` reads them)."""
    return Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")


def models_table(items: list[dict[str, Any]], *, whole: bool) -> Table:
    """One model a line, its name first and whole (it is copied into predict and download); piped, nothing is cut."""
    table = _plain()
    table.add_column("name", no_wrap=True, min_width=max(len(m["name"]) for m in items))
    for name in ("versions", "latest"):
        table.add_column(name, no_wrap=True, justify="right", min_width=len(name))
    table.add_column("aliases", no_wrap=True, overflow="ellipsis", max_width=None if whole else 40)
    table.add_column("framework", no_wrap=True, overflow="ellipsis")
    for m in items:
        latest = m["versions"][-1] if m["versions"] else {}
        aliases = ",".join(f"{a}=v{v}" for a, v in m["aliases"].items()) or "-"
        latest_version = m.get("latest_version")
        table.add_row(m["name"], str(len(m["versions"])), "-" if latest_version is None else str(latest_version),
                      aliases, str(latest.get("framework") or "-"))  # fmt: skip
    return table


def datasets_table(items: list[dict[str, Any]], *, whole: bool) -> Table:
    """One dataset a line: its id first and whole (a training body's ``dataset.uri`` may be the id)."""
    table = _plain()
    table.add_column("id", no_wrap=True, min_width=max(len(d["id"]) for d in items))
    table.add_column("name", no_wrap=True, overflow="ellipsis", max_width=None if whole else 32)
    table.add_column("format", no_wrap=True)
    table.add_column("rows", no_wrap=True, justify="right")
    table.add_column("created", no_wrap=True, overflow="ellipsis")
    table.add_column("uri", no_wrap=True, overflow="ellipsis")
    for d in items:
        rows = d.get("row_count")
        table.add_row(d["id"], d.get("name") or "-", str(d.get("format") or "-"), "-" if rows is None else str(rows),
                      to_the_minute(d.get("created_at") or "-"), d["uri"])  # fmt: skip
    return table


def metrics_table(points: list[dict[str, Any]]) -> Table:
    """One point a line: key, step, epoch, value (``.6g``: --json has it whole) and worker (``-``: none)."""
    table = _plain()
    table.add_column("key", no_wrap=True)
    for name in ("step", "epoch", "value", "worker"):
        table.add_column(name, no_wrap=True, justify="right")
    for p in points:
        epoch, worker = p.get("epoch"), p.get("worker")
        table.add_row(p["key"], str(p["step"]), "-" if epoch is None else str(epoch), f"{p['value']:.6g}",
                      "-" if worker is None else str(worker))  # fmt: skip
    return table
