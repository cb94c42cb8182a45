"""Key/value string tags on models and on model versions, as MLflow's registry tags: set (create or replace) and
delete one, read them with the model. Lookups take ``owner`` as the rest of the registry does (None: an admin);
another owner's model answers as an unknown one (404)."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any, cast

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.errors import NotFound, ValidationFailed
from app.db.base import utcnow
from app.db.models import ModelTag, ModelVersion, ModelVersionTag
from app.db.session import savepoint
from app.schemas.models import TAG_FILTERS_MAX, TAG_KEY_PATTERN, TAG_KEY_RULE, TAG_VALUE_MAX
from app.services import models

_KEY = re.compile(TAG_KEY_PATTERN)
TAGS_MAX = 100
"""The most tags one model, or one version, may have (MLflow documents no limit; a model's tags are read with every
``GET /models`` page, so an unbounded number would slow the listing for everyone). Replacing a tag's value is
always allowed; a new key past the limit is a 422 and nothing is written."""


def check_key(key: str, *, loc: str = "key", source: str = "path") -> str:
    """``key`` when it is a tag key (:data:`TAG_KEY_RULE`), else a 422 at ``loc``."""
    if not _KEY.fullmatch(key):
        raise ValidationFailed.at(loc, f"{key[:60]!r} is not a tag key: {TAG_KEY_RULE}", source=source)
    return key


def parse_filters(texts: Sequence[str]) -> list[tuple[str, str | None]]:
    """``GET /models?tag=key:value`` (or ``tag=key``: any value) as (key, value or None); a 422 names a bad one."""
    if len(texts) > TAG_FILTERS_MAX:
        raise ValidationFailed.at("tag", f"{len(texts)} tag filters; give at most {TAG_FILTERS_MAX}", source="query")
    out: list[tuple[str, str | None]] = []
    for text in texts:
        key, colon, value = text.partition(":")
        if not _KEY.fullmatch(key):
            raise ValidationFailed.at(
                "tag", f"{text[:60]!r}: give key:value (or key for any value); a key is {TAG_KEY_RULE}", source="query"
            )
        if len(value) > TAG_VALUE_MAX:
            raise ValidationFailed.at("tag", f"a tag's value is at most {TAG_VALUE_MAX} characters", source="query")
        out.append((key, value if colon else None))
    return out


def _set(session: Session, row: ModelTag | ModelVersionTag, where: Any, what: str) -> None:
    """Create ``row``, or give its value to the tag of that key already there (``where`` selects the entity's tags;
    ``what`` names it in the 422 of a tag past :data:`TAGS_MAX`). The caller holds the model's row lock, so two
    requests adding tags at once count one after the other (PostgreSQL)."""
    table = type(row)
    for _ in range(2):  # a tag another request created in between is replaced
        old = cast(
            "ModelTag | ModelVersionTag | None",
            session.scalar(select(table).where(*where, table.key == row.key).with_for_update()),
        )
        if old is not None:
            old.value, old.updated_at = row.value, row.updated_at
            return
        if (session.scalar(select(func.count()).select_from(table).where(*where)) or 0) >= TAGS_MAX:
            raise ValidationFailed.at(
                "key", f"{what} has {TAGS_MAX} tags, the most it may have; remove one (DELETE its "
                "tags/{key}) or replace a value (PUT to a key it has) instead of adding another", source="path"
            )  # fmt: skip
        try:
            with savepoint(session):
                session.add(row)
            return
        except IntegrityError:
            continue
    raise RuntimeError(f"could not set the tag {row.key!r}")


def set_model_tag(*, session: Session, name: str, key: str, value: str, owner: str | None = None) -> None:
    check_key(key)
    model = models.locked_model(session=session, name=name, owner=owner)  # a delete racing this: its 404
    tag = ModelTag(model_id=model.id, key=key, value=value, updated_at=utcnow())
    _set(session, tag, [ModelTag.model_id == model.id], f"model {name!r}")


def set_version_tag(
    *, session: Session, name: str, version: int, key: str, value: str, owner: str | None = None
) -> None:
    check_key(key)
    row = models.locked_version(session=session, name=name, version=version, owner=owner)
    tag = ModelVersionTag(version_id=row.id, key=key, value=value, updated_at=utcnow())
    _set(session, tag, [ModelVersionTag.version_id == row.id], f"model {name!r} version {version}")


def delete_model_tag(*, session: Session, name: str, key: str, owner: str | None = None) -> None:
    model = models.get_model(session=session, name=name, owner=owner)
    gone = session.execute(delete(ModelTag).where(ModelTag.model_id == model.id, ModelTag.key == key))
    if not gone.rowcount:  # type: ignore[attr-defined]
        raise NotFound(f"Model {name!r} has no tag {key!r}.")


def delete_version_tag(*, session: Session, name: str, version: int, key: str, owner: str | None = None) -> None:
    row = models.get_version(session=session, name=name, version=version, owner=owner)
    stmt = delete(ModelVersionTag).where(ModelVersionTag.version_id == row.id, ModelVersionTag.key == key)
    if not session.execute(stmt).rowcount:  # type: ignore[attr-defined]
        raise NotFound(f"Model {name!r} version {version} has no tag {key!r}.")


def model_tags(*, session: Session, model_ids: Collection[int]) -> dict[int, dict[str, str]]:
    """Each model's tags by key (one query for a page of models)."""
    out: dict[int, dict[str, str]] = {i: {} for i in model_ids}
    if model_ids:
        stmt = select(ModelTag.model_id, ModelTag.key, ModelTag.value).where(ModelTag.model_id.in_(model_ids))
        for owner_id, key, value in session.execute(stmt.order_by(ModelTag.key)):
            out[owner_id][key] = value
    return out


def version_tags(*, session: Session, model_ids: Collection[int]) -> dict[int, dict[str, str]]:
    """The tags of every version of these models, by key, by the version's row id (one query for a page)."""
    out: dict[int, dict[str, str]] = {}
    if model_ids:
        table = ModelVersionTag
        stmt = select(table.version_id, table.key, table.value).join(ModelVersion, ModelVersion.id == table.version_id)
        for version_id, key, value in session.execute(
            stmt.where(ModelVersion.model_id.in_(model_ids)).order_by(table.key)
        ):
            out.setdefault(version_id, {})[key] = value
    return out


def of_version(*, session: Session, version_id: int) -> dict[str, str]:
    """One version's tags by key."""
    stmt = select(ModelVersionTag.key, ModelVersionTag.value).where(ModelVersionTag.version_id == version_id)
    return {key: value for key, value in session.execute(stmt.order_by(ModelVersionTag.key))}
