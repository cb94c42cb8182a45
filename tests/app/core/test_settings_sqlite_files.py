"""A SQLite database or broker file inside a data root (or the owner root) stops the driver at start-up: any key
could register it as a CSV dataset and read every owner's jobs and requests (security walkthrough F7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.settings import Settings


@pytest.mark.parametrize(
    ("setting", "field", "url"),
    [("SPARKTRAIN_DATABASE_URL", "database_url", "sqlite:///{data}/st.db"),
     ("SPARKTRAIN_DATABASE_URL", "database_url", "sqlite:///{data}/../data/sub/st.db"),
     ("SPARKTRAIN_BROKER_URL", "broker_url", "sqla+sqlite:///{data}/broker.db"),
     ("SPARKTRAIN_DATABASE_URL", "database_url", "sqlite:///{link}/st.db")],
)  # fmt: skip
def test_a_sqlite_file_in_a_data_root_is_refused(tmp_path: Path, setting: str, field: str, url: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "link").symlink_to(data)
    with pytest.raises(ValueError, match=rf"{setting}: the SQLite file {data}/.*st.db|{setting}: the SQLite file "
                                         rf"{data}/broker.db") as refused:  # fmt: skip
        Settings(var_dir=tmp_path / "var", data_roots=[data], **{field: url.format(data=data, link=tmp_path / "link")})
    assert f"lies in {data}, where keys read datasets; put it beside the data roots" in str(refused.value)


def test_in_an_owner_space_too_and_beside_the_roots_it_starts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"the SQLite file .* lies in .*spaces"):
        Settings(var_dir=tmp_path / "var", data_roots=[tmp_path / "data"], owner_root=tmp_path / "spaces",
                 database_url=f"sqlite:///{tmp_path}/spaces/alice/st.db")  # fmt: skip
    urls = {"database_url": f"sqlite:///{tmp_path}/db/st.db", "broker_url": f"sqla+sqlite:///{tmp_path}/b.db"}
    beside = Settings(var_dir=tmp_path / "var", data_roots=[tmp_path / "data"], **urls)
    assert beside.database_url == f"sqlite:///{tmp_path}/db/st.db"
    assert Settings(var_dir=tmp_path / "var", data_roots=[tmp_path / "data"]).database_url.endswith("var/sparktrain.db")
