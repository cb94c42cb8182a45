"""How the client names things: a model version (``NAME``, ``NAME:VERSION``, ``NAME@ALIAS``) and a Server-Sent
Event of a job's stream."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

MODEL_REF = re.compile(r"^(?P<name>[^:@]+)(?::(?P<version>\d+)|@(?P<alias>[^:@]+))?$")
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}\Z")
"""A model name as the service takes one (NAME_PATTERN, app/schemas/train.py: nothing of the service is imported)."""
NAME_RULE = "a model name is 1 to 200 letters, digits, '.', '_' or '-', the first a letter or a digit"


@dataclass(frozen=True)
class Event:
    """One Server-Sent Event of ``GET /jobs/{id}/events``: ``state``, ``metrics``, ``log`` or ``end``."""

    type: str
    id: str
    data: dict[str, Any]


@dataclass(frozen=True)
class ModelRef:
    """``NAME``, ``NAME:VERSION`` or ``NAME@ALIAS``."""

    name: str
    version: int | None = None
    alias: str | None = None

    @classmethod
    def parse(cls, text: str) -> ModelRef:
        match = MODEL_REF.match(text.strip())
        if match is None:
            raise ValueError(f"{text!r} is not NAME, NAME:VERSION or NAME@ALIAS")
        version = match.group("version")
        return cls(match.group("name"), int(version) if version else None, match.group("alias"))

    def selector(self) -> dict[str, Any]:
        """The ``model`` member of an evaluate or predict body."""
        out: dict[str, Any] = {"name": self.name}
        if self.version is not None:
            out["version"] = self.version
        if self.alias is not None:
            out["alias"] = self.alias
        return out


def parse_events(lines: Iterator[str]) -> Iterator[Event]:
    """Server-Sent Events from the lines of a ``text/event-stream`` body (comments skipped)."""
    kind, event_id, data = "message", "", list[str]()
    for line in lines:
        if not line:
            if data:
                yield Event(kind, event_id, json.loads("\n".join(data)))
            kind, event_id, data = "message", "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            kind = value
        elif field == "id":
            event_id = value
        elif field == "data":
            data.append(value)
