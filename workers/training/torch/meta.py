"""A torch checkpoint's ``meta.json`` (the network, the model card, the epoch, the run that wrote it): plain JSON,
read without torch, so the API can check a ``resume_from`` or a checkpoint to evaluate without loading torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

META = "meta.json"


def read_meta(directory: str | Path) -> dict[str, Any]:
    return dict(json.loads((Path(directory) / META).read_text()))
