"""An owner's quotas and what it uses of them: visible to that owner and to admins only."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import CallerDep, SessionDep, SettingsDep
from app.schemas.owners import UsageRead
from app.services.quotas import owner_usage

router = APIRouter(tags=["owners"])


@router.get("/owners/me/usage", response_model=UsageRead, summary="The caller's quotas and what it uses of them")
def my_usage(session: SessionDep, settings: SettingsDep, caller: CallerDep) -> UsageRead:
    return UsageRead.model_validate(owner_usage(session=session, settings=settings, caller=caller, owner=caller.owner))


@router.get(
    "/owners/{owner}/usage",
    response_model=UsageRead,
    summary="An owner's quotas and usage (that owner and admins only; 404 for anyone else)",
)
def usage_of(owner: str, session: SessionDep, settings: SettingsDep, caller: CallerDep) -> UsageRead:
    return UsageRead.model_validate(owner_usage(session=session, settings=settings, caller=caller, owner=owner))
