"""Quotas on a real database (SQLite and PostgreSQL) and a real Redis: the limits an owner gets, what a submit over
them is answered, which waiting jobs fit again, the request token bucket shared by two drivers, and settings that
are refused at start-up naming the setting."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from typing import Any

import pytest

from app.core.errors import TooManyRequests, ValidationFailed
from app.core.jobstates import JobStatus
from app.core.settings import Settings, load_settings
from app.db.base import utcnow
from app.db.models import Job
from app.db.session import transaction
from app.services import jobs, quotas

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _settings(**values: Any) -> Settings:
    return Settings(var_dir="/tmp/unused", **values)


def _job(db: Any, owner: str, status: JobStatus = JobStatus.QUEUED, slots: int = 1, waiting: str | None = None) -> str:
    with transaction(db) as s:
        job, _ = jobs.create_job(session=s, job_type="train", request={}, framework="torch", owner=owner, slots=slots)
        job.waiting_for = waiting
        if status != JobStatus.QUEUED:
            jobs.transition(session=s, job_id=job.id, sources=[JobStatus.QUEUED], target=JobStatus.STARTING,
                            worker_id="h:1:b", heartbeat_at=utcnow())  # fmt: skip
        return job.id


def test_an_owner_gets_the_default_with_its_own_quotas_over_it() -> None:
    settings = _settings(quota_concurrent_jobs=2, quota_task_slots="8",
                         owner_quotas='{"alice": {"task_slots": 2, "requests_per_s": 5}}')  # fmt: skip
    assert quotas.limits_for(settings=settings, owner="alice") == quotas.Limits(2, 2, 0, 5)
    assert quotas.limits_for(settings=settings, owner="bob") == quotas.Limits(2, 8, 0, 0)


@pytest.mark.parametrize(
    ("env", "words"),
    [({"SPARKTRAIN_QUOTA_TASK_SLOTS": "-1"}, "SPARKTRAIN_QUOTA_TASK_SLOTS must be a whole number >= 0"),
     ({"SPARKTRAIN_QUOTA_CONCURRENT_JOBS": "2.5"}, "SPARKTRAIN_QUOTA_CONCURRENT_JOBS must be a whole number"),
     ({"SPARKTRAIN_QUOTA_REQUESTS_PER_S": "many"}, "SPARKTRAIN_QUOTA_REQUESTS_PER_S must be a whole number"),
     ({"SPARKTRAIN_OWNER_QUOTAS": '{"alice": {"queued_jobs": -3}}'}, "SPARKTRAIN_OWNER_QUOTAS alice.queued_jobs"),
     ({"SPARKTRAIN_OWNER_QUOTAS": '{"alice": {"slots": 3}}'}, "'alice' has unknown quotas ['slots']"),
     ({"SPARKTRAIN_OWNER_QUOTAS": "[1, 2]"}, "SPARKTRAIN_OWNER_QUOTAS must be a JSON object")],
)  # fmt: skip
def test_bad_quotas_fail_at_start_up_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], words: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        load_settings()


def test_python_m_app_with_a_bad_quota_exits_saying_which_setting(tmp_path: Any) -> None:
    env = {**os.environ, "SPARKTRAIN_VAR_DIR": str(tmp_path), "SPARKTRAIN_QUOTA_QUEUED_JOBS": "-2"}
    run = subprocess.run([sys.executable, "-m", "app"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert run.returncode != 0
    assert "SPARKTRAIN_QUOTA_QUEUED_JOBS must be a whole number >= 0" in run.stderr
    assert "Traceback" not in run.stderr


def test_python_m_app_with_its_database_away_exits_in_two_lines(tmp_path: Any) -> None:
    url = "postgresql+psycopg://sparktrain:s3cret@127.0.0.1:1/nothing"  # nothing listens on port 1
    env = {**os.environ, "SPARKTRAIN_VAR_DIR": str(tmp_path), "SPARKTRAIN_DATABASE_URL": url}
    run = subprocess.run([sys.executable, "-m", "app"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert run.returncode == 3, run.stderr
    assert "the database is unreachable: postgresql+psycopg://sparktrain:***@127.0.0.1:1/nothing" in run.stderr
    assert "Connection refused" in run.stderr and "SPARKTRAIN_DATABASE_URL" in run.stderr
    assert "Traceback" not in run.stderr and "s3cret" not in run.stderr + run.stdout
    assert len(run.stderr.strip().splitlines()) <= 4, run.stderr


@pytest.mark.parametrize(
    ("url", "words"),
    [  # a password as a query parameter (psycopg takes one) was printed as given
        ("postgresql+psycopg://sparktrain@127.0.0.1:1/nothing?password=s3cret", "?password=***"),
        ("postgresql+psycopg://sparktrain@127.0.0.1:1/nothing?sslpassword=s3cret", "?sslpassword=***"),
        # a dialect SQLAlchemy knows whose driver is not installed: a page of traceback (ModuleNotFoundError)
        ("mysql://u:s3cret@127.0.0.1:1/db", "the database driver for mysql://u:***@127.0.0.1:1/db is not installed"),
        # a broker away: the consumer gave up after 60 s with a traceback
        ("redis://:s3cret@127.0.0.1:1/9", "the job broker cannot be used: redis://:***@127.0.0.1:1/9: Error 111"),
    ],
)
def test_python_m_app_never_shows_the_databases_password(tmp_path: Any, url: str, words: str) -> None:
    setting = "SPARKTRAIN_BROKER_URL" if url.startswith("redis") else "SPARKTRAIN_DATABASE_URL"
    env = {**os.environ, "SPARKTRAIN_VAR_DIR": str(tmp_path), setting: url}
    run = subprocess.run([sys.executable, "-m", "app"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120, check=False)  # fmt: skip
    assert run.returncode == 3, run.stderr
    assert words in run.stderr and "s3cret" not in run.stderr + run.stdout, run.stderr
    assert "Traceback" not in run.stderr, run.stderr


def test_a_submit_over_the_queued_quota_is_a_429_naming_it(db: Any) -> None:
    limits = quotas.Limits(queued_jobs=2, task_slots=4)
    for _ in range(2):
        _job(db, "alice")
    _job(db, "bob")
    with db() as s:
        with pytest.raises(TooManyRequests) as caught:
            quotas.check_submit(session=s, owner="alice", limits=limits, slots=1)
        quotas.check_submit(session=s, owner="bob", limits=limits, slots=1)  # another owner's count
        with pytest.raises(ValidationFailed, match="needs 5 task slots"):
            quotas.check_submit(session=s, owner="bob", limits=limits, slots=5)  # could never start
    problem = caught.value.problem()
    assert (problem["status"], problem["quota"], problem["limit"], problem["used"]) == (429, "queued_jobs", 2, 2)
    assert caught.value.headers["Retry-After"] == str(quotas.QUEUE_RETRY_AFTER_S)


def test_what_blocks_a_start_and_which_waiting_jobs_are_woken(db: Any) -> None:
    settings = _settings(quota_task_slots=4, owner_quotas='{"carol": {"concurrent_jobs": 1}}')
    _job(db, "alice", JobStatus.STARTING, slots=3)
    small = _job(db, "alice", waiting="task_slots", slots=1)
    big = _job(db, "alice", waiting="task_slots", slots=2)
    _job(db, "carol", JobStatus.STARTING)
    blocked = _job(db, "carol", waiting="concurrent_jobs")
    with db() as s:
        limits = quotas.limits_for(settings=settings, owner="alice")
        assert quotas.blocking_quota(session=s, owner="alice", slots=1, limits=limits) is None
        assert quotas.blocking_quota(session=s, owner="alice", slots=2, limits=limits) == "task_slots"
        carol = quotas.limits_for(settings=settings, owner="carol")
        assert quotas.blocking_quota(session=s, owner="carol", slots=1, limits=carol) == "concurrent_jobs"
        usage = quotas.usage(session=s, owner="alice", limits=limits)
    assert usage["quotas"]["task_slots"] == {"limit": 4, "used": 3}
    assert usage["quotas"]["concurrent_jobs"] == {"limit": None, "used": 1}
    assert usage["waiting"] == {"task_slots": 2}
    sent: list[tuple[str, str, str]] = []
    woken = quotas.wake(db=db, settings=settings, send=lambda *m: sent.append(m))
    assert woken == [small], "the one that fits the slot left; not the bigger one, not carol's"
    assert sent == [("train.torch", small, settings.queue)]
    assert quotas.wake(db=db, settings=settings, send=lambda *m: sent.append(m)) == [], "its message is on its way"
    with db() as s:
        assert s.get(Job, small).woken_at is not None and s.get(Job, big).woken_at is None
        assert s.get(Job, blocked).waiting_for == "concurrent_jobs"


def _limiters(request: pytest.FixtureRequest, db: Any) -> tuple[quotas.RequestLimiter, quotas.RequestLimiter]:
    """Two drivers' limiters on one store: the database, or Redis."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        return quotas.RequestLimiter(db=db, redis_url=url), quotas.RequestLimiter(db=db, redis_url=url)
    return quotas.RequestLimiter(db=db, redis_url=None), quotas.RequestLimiter(db=db, redis_url=None)


@pytest.fixture(params=["database", "redis"])
def limiters(request: pytest.FixtureRequest, db: Any) -> tuple[quotas.RequestLimiter, quotas.RequestLimiter]:
    return _limiters(request, db)


def test_the_request_bucket_is_shared_by_two_drivers(limiters: Any) -> None:
    first, second = limiters
    bucket = quotas.RequestLimiter.bucket(f"Bearer {uuid.uuid4().hex}")
    waits = [(first if i % 2 else second).take(bucket, 4) for i in range(6)]
    assert waits[:4] == [0.0] * 4, "a full bucket holds one second's worth"
    assert all(0 < w <= 0.25 + 0.05 for w in waits[4:]), waits
    other = quotas.RequestLimiter.bucket(f"Bearer {uuid.uuid4().hex}")
    assert first.take(other, 4) == 0.0, "every key has its own bucket"


def test_the_bucket_is_named_by_the_key_not_by_how_the_header_spells_it() -> None:
    key = uuid.uuid4().hex
    spellings = {quotas.RequestLimiter.bucket(h) for h in (f"Bearer {key}", f"bearer  {key}", f" BEARER {key} ")}
    assert len(spellings) == 1, "one key, one bucket: a changed spelling must not buy a fresh bucket"
    assert quotas.RequestLimiter.bucket(f"Bearer {uuid.uuid4().hex}") not in spellings
    assert key not in spellings.pop(), "the bucket id never reveals the key"


def test_a_quota_for_an_owner_no_key_has_is_named_at_start() -> None:
    """SPARKTRAIN_OWNER_QUOTAS='{"alcie": ...}' (a typo) was taken without a word: alice kept the default."""
    keys = "alice-0123456789abcdef:alice, root-0123456789abcdef0:root:admin"
    settings = load_settings(api_keys=keys, owner_quotas='{"alcie": {"queued_jobs": 5}, "alice": {"queued_jobs": 2}}')
    assert quotas.unknown_owners(settings) == [
        "SPARKTRAIN_OWNER_QUOTAS names 'alcie', which no API key has (the owners: alice, root)"
    ]
    assert quotas.unknown_owners(load_settings(owner_quotas='{"anyone": {"queued_jobs": 5}}')) == []  # no keys
