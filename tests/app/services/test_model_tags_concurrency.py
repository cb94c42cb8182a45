"""The 100-tag limit holds when requests add tags at once. On SQLite the model row's ``FOR UPDATE`` is nothing, and
pysqlite runs a read outside any transaction: eight requests adding a tag to a model with 99 each counted 99 and
wrote, leaving 106 or 107 (review, 2026-12-07). The lock is now a write to the model's row, which takes SQLite's
write lock before the count; PostgreSQL's FOR UPDATE held already."""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from app.core.errors import ValidationFailed
from app.db.migrate import upgrade_database
from app.db.models import Model, ModelTag
from app.db.session import create_db_engine, create_sessionmaker
from app.services import model_tags
from app.services.model_tags import TAGS_MAX

ADDING = 8


def test_requests_adding_tags_at_once_stop_at_the_limit(db_url: str) -> None:
    engine = create_db_engine(db_url)
    upgrade_database(engine)
    db = create_sessionmaker(engine)
    with db() as s:
        model = Model(name="m", owner="alice")
        s.add(model)
        s.flush()
        s.add_all(ModelTag(model_id=model.id, key=f"k{i}", value="v") for i in range(TAGS_MAX - 1))
        s.commit()
        model_id = model.id
    start = threading.Barrier(ADDING)
    outcomes: list[str] = []

    def add(i: int) -> None:
        with db() as s:
            start.wait()
            try:
                model_tags.set_model_tag(session=s, name="m", key=f"new{i}", value="v", owner="alice")
                s.commit()
                outcomes.append("added")
            except ValidationFailed:
                s.rollback()
                outcomes.append("refused")

    threads = [threading.Thread(target=add, args=(i,)) for i in range(ADDING)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with db() as s:
        count = s.scalar(select(func.count()).select_from(ModelTag).where(ModelTag.model_id == model_id))
    engine.dispose()
    assert count == TAGS_MAX, (count, outcomes)
    assert sorted(outcomes) == ["added"] + ["refused"] * (ADDING - 1), outcomes
