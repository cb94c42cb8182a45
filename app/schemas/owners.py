"""Wire models of ``GET /owners/me/usage``: an owner's quotas and what it uses of them."""

from __future__ import annotations

from pydantic import BaseModel, Field


class QuotaUse(BaseModel):
    limit: int | None = Field(description="The quota; null: no limit.")
    used: int | None = Field(None, description="What the owner uses of it now (not given for requests_per_s).")


class OwnerQuotas(BaseModel):
    concurrent_jobs: QuotaUse = Field(description="Jobs running at once (STARTING, RUNNING, CANCELLING).")
    task_slots: QuotaUse = Field(description="Task slots the owner's running jobs hold (a job's workers).")
    queued_jobs: QuotaUse = Field(description="Jobs in QUEUED; a submit beyond the limit is a 429.")
    requests_per_s: QuotaUse = Field(description="Requests per second per API key (a token bucket).")


class UsageRead(BaseModel):
    owner: str
    quotas: OwnerQuotas
    waiting: dict[str, int] = Field(
        description="Queued jobs waiting for a quota to free up, by quota (concurrent_jobs, task_slots)."
    )
    data_space: str | None = Field(
        None,
        description="The owner's private data directory (SPARKTRAIN_OWNER_ROOT/<owner>): its datasets and batch "
        "predictions; null when the service has no owner spaces.",
    )
