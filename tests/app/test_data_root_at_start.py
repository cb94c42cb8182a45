"""The default data root, ``var/data/``, exists once the service has started: the README tells a newcomer to copy
their own files there, and after the first start it did not exist (only ``var/artifacts`` and the databases).
Data roots an operator names are theirs: the service makes none of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers import running_service


def test_the_default_data_root_is_made_at_start(spark: Any, tmp_path: Path) -> None:
    with running_service(spark, tmp_path) as svc:
        assert svc.client.get("/healthz").status_code == 200
        assert (tmp_path / "var" / "data").is_dir()


def test_data_roots_an_operator_names_are_left_alone(spark: Any, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    with running_service(spark, tmp_path, data_roots=[mine]) as svc:
        assert svc.client.get("/healthz").status_code == 200
        assert not (tmp_path / "var" / "data").exists()
