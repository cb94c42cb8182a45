"""The table ``sparktrain jobs`` prints."""

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
