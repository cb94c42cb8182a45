"""Service settings (environment prefix ``SPARKTRAIN_``), built once at start-up by :func:`load_settings`.

The defaults are the *embedded* set-up: a SQLite file database, a SQLite Celery broker and Spark ``local[*]``,
all under ``var/``, so ``python -m app`` needs no server. Production points the same settings at PostgreSQL,
Redis and a Spark cluster (see ``docker-compose.yml``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlparse

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.core.auth import ApiKey, parse_api_keys, valid_owner
from app.core.urls import check_broker_url, check_database_url, holds, overlap

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout (or install) root: ``spark-conf/`` and ``datasets/`` live here."""


QUOTAS = ("concurrent_jobs", "task_slots", "queued_jobs", "requests_per_s")
"""The quotas an owner has (docs/configuration.md#quotas); 0 is no limit."""
QUOTA_FIELDS = tuple(f"quota_{name}" for name in QUOTAS)


def quota_value(setting: str, value: Any) -> int:
    """A quota: a whole number >= 0, given as a number or as text; anything else is refused naming ``setting``."""
    number: Any = value
    if isinstance(value, str) and value.strip().lstrip("+").isdigit():
        number = int(value.strip())
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, int) or number < 0:
        raise ValueError(f"{setting} must be a whole number >= 0 (0: no limit), got {value!r}")
    return number


def parse_owner_quotas(value: Any) -> dict[str, dict[str, int]]:
    """``SPARKTRAIN_OWNER_QUOTAS``: a JSON object of owners, each an object of quotas (names from QUOTAS)."""
    setting = "SPARKTRAIN_OWNER_QUOTAS"
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError as exc:
            raise ValueError(f"{setting} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError(f'{setting} must be a JSON object like {{"alice": {{"concurrent_jobs": 4}}}}')
    out: dict[str, dict[str, int]] = {}
    for owner, quotas in value.items():
        if not valid_owner(str(owner)):  # a name no key can have: its quotas would never apply
            raise ValueError(f"{setting}: owner {owner!r} must be 1 to 200 letters, digits, '.', '_', '@' or '-'")
        if not isinstance(quotas, dict):
            raise ValueError(f"{setting}: the quotas of {owner!r} must be an object of {', '.join(QUOTAS)}")
        unknown = sorted(set(quotas) - set(QUOTAS))
        if unknown:
            raise ValueError(f"{setting}: {owner!r} has unknown quotas {unknown}; known: {', '.join(QUOTAS)}")
        out[str(owner)] = {name: quota_value(f"{setting} {owner}.{name}", v) for name, v in quotas.items()}
    return out


def _env(field: str | None) -> str:
    return f"SPARKTRAIN_{str(field).upper()}"


def _split_csv(value: Any, setting: str) -> Any:
    """A comma-separated list; one trailing comma is allowed, any other empty item (``a,,b``: an unset variable
    in a template) is refused rather than dropped."""
    if not isinstance(value, str):
        return value
    parts = [part.strip() for part in value.split(",")]
    if len(parts) > 1 and not parts[-1]:
        parts.pop()
    if value.strip() and not all(parts):
        raise ValueError(f"{setting} item {parts.index('') + 1} is empty; write comma-separated items without ',,'")
    return [part for part in parts if part]


SPARK_MASTER = re.compile(
    r"^(local(\[(\*|[1-9]\d*)(,[0-9]+)?\])?|local-cluster\[\d+,\d+,\d+\]|(spark|k8s)://\S+|yarn)$"
)
_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://\S+$")  # scheme://rest; a one-letter scheme is a Windows drive


class Settings(BaseSettings):
    # Errors never repeat the value they refuse: it may be an API key or a URL with a password.
    model_config = SettingsConfigDict(
        env_prefix="SPARKTRAIN_", extra="ignore", frozen=True, hide_input_in_errors=True, allow_inf_nan=False
    )
    _output_roots: list[Path] | None = PrivateAttr(None)
    """Set on a copy scoped to a caller with a data space (app/services/spaces.py); never from the environment."""

    # --- where things live -------------------------------------------------------------------------------
    var_dir: Path = Field(Path("var"), description="Working state of the embedded default (database, broker).")
    database_url: str = Field("", description="SQLAlchemy URL; empty = SQLite file under var_dir.")
    broker_url: str = Field("", description="Celery broker URL; empty = SQLite broker under var_dir.")
    data_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated directories that dataset URIs may point into; empty = datasets/ and var/data/.",
    )
    owner_root: Path | None = Field(
        None,
        description="A directory of private data spaces, one per owner (<owner_root>/<owner>/, made on first use): "
        "a key that is not an admin then reads its own space and the data roots, writes batch predictions only into "
        "its own space, and cannot see other owners' spaces; admins reach them all. Empty = no spaces. Not inside "
        "a data root.",
    )
    artifact_root: Path = Field(Path("var/artifacts"), description="Where models and checkpoints are written.")
    artifact_store: str = Field(
        "",
        description="A URI (s3://bucket/prefix, hdfs://...) models and checkpoints are published to; empty keeps "
        "them under artifact_root. Credentials come from the environment (AWS_* for S3).",
    )
    remote_uri_prefixes: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated URI prefixes (hdfs://..., s3a://bucket/...) datasets may also come from.",
    )

    # --- Spark ---------------------------------------------------------------------------------------------
    spark_master: str = "local[*]"
    spark_app_name: str = Field("sparktrain", min_length=1)
    spark_local_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="With a local[...] master, the Spark JVM starts at this niceness, and with it every executor "
        "thread and Python worker (training, evaluation, batch prediction): on a machine the API and its database "
        "share with training, requests are served first. 0 = the same priority as the API. Not applied to "
        "cluster masters.",
    )
    spark_conf_dir: Path = Field(REPO_ROOT / "spark-conf", description="Exported as SPARK_CONF_DIR.")
    spark_conf: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict, description="Extra Spark settings as a JSON object (overrides spark-conf/)."
    )
    spark_profile: str = Field(
        "",
        pattern=r"^[A-Za-z0-9_-]*$",
        description="A profile spark-conf/<name>.conf applied over spark-defaults.conf, e.g. gpu (the RAPIDS "
        "Accelerator and GPU scheduling, app/spark/profile.py); empty = none.",
    )
    rapids_jar: Path | None = Field(
        None,
        description="The RAPIDS Accelerator jar the gpu profile loads; unset = $SPARK_RAPIDS_JAR, else the newest "
        "/opt/sparkRapidsPlugin/rapids-4-spark_*.jar. Without a jar the plugin stays off.",
    )

    # --- jobs ----------------------------------------------------------------------------------------------
    in_process_consumer: bool = Field(True, description="Run a Celery consumer (threads pool) inside the driver.")
    consumer_concurrency: int = Field(2, ge=1, le=64, description="Jobs one driver process runs at once.")
    queue: str = Field("sparktrain", min_length=1, description="Celery queue the jobs travel on.")
    visibility_timeout_s: int = Field(
        12 * 3600, ge=60, description="Redis redelivery timeout; must exceed the longest job."
    )
    broker_poll_interval_s: float = Field(0.05, gt=0, description="Polling period of server-less brokers.")
    heartbeat_interval_s: float = Field(1.0, gt=0, description="Job watcher period: heartbeat and cancel check.")
    heartbeat_stale_s: float = Field(
        30.0, gt=0, description="A running job whose heartbeat is older than this lost its driver (the reconciler)."
    )
    reconcile_interval_s: float = Field(15.0, gt=0, description="How often the reconciler looks for lost jobs.")
    lost_message_after_s: float = Field(
        60.0,
        ge=0,
        description="Redis broker: a QUEUED job whose message has been on none of its queues this long is sent again "
        "(a broker restart can lose a message being taken; app/jobs/lost_messages.py); 0 = never.",
    )
    data_path: Literal["direct", "export"] = Field(
        "direct",
        description="torch jobs: stream prepared rows into the barrier stage each job (direct), or export them once "
        "as per-worker tensor shards under the artifact root that later jobs on the same data reuse (export).",
    )
    model_cache_size: int = Field(8, ge=1, le=1000, description="Models the driver keeps loaded for online predict.")
    max_predict_rows: int = Field(10_000, ge=1, description="Rows one online /predict may carry; more: 413.")
    checkpoint_retention: int = Field(0, ge=0, description="Checkpoints kept per job (the newest); 0 keeps all.")
    max_epochs: int = Field(1000, ge=1)
    max_workers_per_job: int = Field(64, ge=1)
    max_parameters: int = Field(
        100_000_000, ge=1, description="Parameters one torch network may have (400 MB of float32 weights); more: 422."
    )
    max_activations: int = Field(
        1_000_000_000,
        ge=1,
        description="Layer outputs of one torch batch per worker (batch size times every layer's output size), "
        "4 GB of float32 before the backward pass; more: 422.",
    )
    max_trials: int = Field(100, ge=1, le=100_000, description="Trials one tuning job (POST /tune) may ask for.")

    # --- failures ------------------------------------------------------------------------------------------
    db_retry_s: float = Field(
        120.0, ge=0, description="How long a running job's writes wait for the database to come back (restarts)."
    )
    retry_delay_s: float = Field(
        15.0, ge=0, description="A job whose attempt failed on the artifact store (full, unreachable) runs again after."
    )
    stop_grace_s: float = Field(
        10.0, ge=0, description="On SIGINT/SIGTERM: how long the driver waits for the jobs it handed back to unwind."
    )
    slot_wait_s: float = Field(
        300.0, ge=1, le=3600, description="How long a job that ran before waits for its task slots to come back."
    )

    # --- quotas per owner (0: no limit) ---------------------------------------------------------------------
    quota_concurrent_jobs: int = Field(0, description="Jobs one owner may run at once; more wait in QUEUED.")
    quota_task_slots: int = Field(0, description="Task slots one owner's running jobs may hold; more wait in QUEUED.")
    quota_queued_jobs: int = Field(0, description="Jobs one owner may have QUEUED; a submit beyond is a 429.")
    quota_requests_per_s: int = Field(0, description="Requests per second per API key (a token bucket); beyond: 429.")
    owner_quotas: Annotated[dict[str, dict[str, int]], NoDecode] = Field(
        default_factory=dict,
        description='Per-owner quotas over the defaults, as JSON: {"alice": {"concurrent_jobs": 4}}.',
    )

    # --- HTTP ----------------------------------------------------------------------------------------------
    host: str = Field("127.0.0.1", min_length=1)
    port: int = Field(8000, ge=0, le=65535)
    api_keys: Annotated[list[ApiKey], NoDecode] = Field(
        default_factory=list,
        repr=False,
        description="Empty: no authentication (every caller is the anonymous admin). Else comma-separated "
        "key:owner or key:owner:admin; requests send 'Authorization: Bearer <key>'.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = Field(
        "text",
        description="json: one JSON object per line with level, logger, message, request_id and job_id "
        "(app/core/logging.py).",
    )
    metrics_public: bool = Field(
        False, description="Serve GET /metrics (Prometheus) without an API key; otherwise it needs an admin's key."
    )
    events_poll_s: float = Field(
        0.25,
        gt=0,
        le=10,
        description="How often a driver reads the database for each job that has SSE clients (GET /jobs/{id}/events).",
    )

    @field_validator("data_roots", mode="before")
    @classmethod
    def _csv(cls, value: Any, info: ValidationInfo) -> Any:
        return _split_csv(value, _env(info.field_name))

    @field_validator("remote_uri_prefixes", mode="before")
    @classmethod
    def _prefixes(cls, value: Any) -> Any:
        value = _split_csv(value, "SPARKTRAIN_REMOTE_URI_PREFIXES")
        for position, prefix in enumerate(value if isinstance(value, list) else [], start=1):
            if not _URI.match(str(prefix)) or str(prefix).lower().startswith("file:"):
                raise ValueError(
                    f"SPARKTRAIN_REMOTE_URI_PREFIXES item {position} is not a remote URI prefix like s3a://bucket/data/"
                )
        return value

    @field_validator("api_keys", mode="before")
    @classmethod
    def _api_keys(cls, value: Any) -> Any:
        value = _split_csv(value, "SPARKTRAIN_API_KEYS")
        return parse_api_keys(value) if isinstance(value, list | tuple) else value

    @field_validator("var_dir", "artifact_root", "spark_conf_dir", mode="before")
    @classmethod
    def _path(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str) and not value.strip():  # Path("") is the working directory, never meant
            raise ValueError(f"{_env(info.field_name)} is empty; give a directory or leave it unset")
        return value

    @field_validator("owner_root", "rapids_jar", mode="before")
    @classmethod
    def _optional_path(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value  # documented: empty = unset

    @field_validator("spark_master")
    @classmethod
    def _spark_master(cls, value: str) -> str:
        if not SPARK_MASTER.match(value):
            raise ValueError(
                "SPARKTRAIN_SPARK_MASTER must be local, local[N], local[N,F], local[*], local-cluster[N,C,M], "
                "spark://host:port (or host1:port1,host2:port2), k8s://https://host:port or yarn"
            )
        return value

    @field_validator("database_url", "broker_url")
    @classmethod
    def _url(cls, value: str, info: ValidationInfo) -> str:
        if value:
            (check_database_url if info.field_name == "database_url" else check_broker_url)(value)
        return value

    @field_validator("artifact_store")
    @classmethod
    def _artifact_store(cls, value: str) -> str:
        if value and not _URI.match(value):
            raise ValueError(
                "SPARKTRAIN_ARTIFACT_STORE must be a URI like s3://bucket/prefix, hdfs://namenode/path or "
                "file:///path, or empty"
            )
        return value

    @field_validator("log_level", "log_format", mode="before")
    @classmethod
    def _any_case(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            return value.strip().upper() if info.field_name == "log_level" else value.strip().lower()
        return value

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _json_object(cls, value: Any) -> Any:
        example = 'a JSON object of Spark settings, e.g. {"spark.executor.memory": "4g"}'
        if isinstance(value, str):
            try:
                value = json.loads(value) if value.strip() else {}
            except ValueError as exc:
                raise ValueError(f"SPARKTRAIN_SPARK_CONF is not JSON ({exc}); write {example}") from None
        if not isinstance(value, dict):
            raise ValueError(f"SPARKTRAIN_SPARK_CONF must be {example}")
        out: dict[str, str] = {}
        for key, item in value.items():
            if not str(key).strip() or isinstance(item, dict | list) or item is None:
                raise ValueError(f"SPARKTRAIN_SPARK_CONF: every key must be a name and every value a string, "
                                 f"number or boolean; {example}")  # fmt: skip
            out[str(key)] = json.dumps(item) if isinstance(item, bool) else str(item)
        return out

    @field_validator(*QUOTA_FIELDS, mode="before")
    @classmethod
    def _quota(cls, value: Any, info: ValidationInfo) -> int:
        return quota_value(_env(info.field_name), value)

    @field_validator("owner_quotas", mode="before")
    @classmethod
    def _owner_quotas(cls, value: Any) -> dict[str, dict[str, int]]:
        return parse_owner_quotas(value)

    @model_validator(mode="after")
    def _fill_defaults(self) -> Settings:
        problems: list[str] = []  # every one at once: an operator fixing them one start at a time was not helped
        if self.heartbeat_stale_s <= 2 * self.heartbeat_interval_s:  # else running jobs are taken for lost
            problems.append(
                "SPARKTRAIN_HEARTBEAT_STALE_S must be more than twice SPARKTRAIN_HEARTBEAT_INTERVAL_S "
                f"({self.heartbeat_stale_s:g} <= 2 x {self.heartbeat_interval_s:g})"
            )
        var = self.var_dir.resolve()
        updates: dict[str, Any] = {"var_dir": var}
        if not self.database_url:
            updates["database_url"] = f"sqlite:///{var / 'sparktrain.db'}"
        if not self.broker_url:
            updates["broker_url"] = f"sqla+sqlite:///{var / 'broker.db'}"
        roots = self.data_roots or [REPO_ROOT / "datasets", var / "data"]
        updates["data_roots"] = [Path(r).resolve() for r in roots]
        updates["artifact_root"] = artifacts = self.artifact_root.resolve()
        store = self.artifact_store  # a local store is where the models are: the same rules as the artifact root
        models = [artifacts, *([Path(unquote(urlparse(store).path)).resolve()] if store.startswith("file:") else [])]
        spaces = updates["owner_root"] = self.owner_root.resolve() if self.owner_root is not None else None
        for root in updates["data_roots"]:
            if spaces is not None and overlap(spaces, root):
                problems.append(
                    f"SPARKTRAIN_OWNER_ROOT {spaces} and the data root {root} overlap: every key could read the "
                    "spaces through the data root; put them side by side"
                )
            held = [m for m in models if overlap(root, m)]
            if held or holds(root, var):
                what = f"the artifact root {held[0]}" if held else f"the var dir {var}"
                problems.append(
                    f"SPARKTRAIN_DATA_ROOTS: {root} and {what} overlap: every key could read other owners' models "
                    "and the service's own files as datasets (and write batch predictions among them); put the "
                    "data roots beside them"
                )
        for setting, url in (("SPARKTRAIN_DATABASE_URL", updates.get("database_url", self.database_url)),
                             ("SPARKTRAIN_BROKER_URL", updates.get("broker_url", self.broker_url))):  # fmt: skip
            file = sqlite_file(url)
            inside = [d for d in [*updates["data_roots"], *([spaces] if spaces else [])] if file and holds(d, file)]
            if inside:  # outside the var dir: a key could read every owner's jobs as a CSV dataset
                problems.append(f"{setting}: the SQLite file {file} lies in {inside[0]}, where keys read datasets; "
                                "put it beside the data roots")  # fmt: skip
        if spaces is not None and (any(overlap(spaces, m) for m in models) or holds(spaces, var)):
            problems.append(
                f"SPARKTRAIN_OWNER_ROOT {spaces} overlaps the artifact root {artifacts} or holds the var dir {var}: "
                "an owner's space would hold other owners' models; put it beside them"
            )
        updates["spark_conf_dir"] = self.spark_conf_dir.resolve()
        if not updates["spark_conf_dir"].is_dir():  # Spark would start without spark-defaults.conf, silently
            problems.append(f"SPARKTRAIN_SPARK_CONF_DIR {updates['spark_conf_dir']} is not a directory")
        elif self.spark_profile and not (updates["spark_conf_dir"] / f"{self.spark_profile}.conf").is_file():
            problems.append(
                f"SPARKTRAIN_SPARK_PROFILE {self.spark_profile!r}: there is no {updates['spark_conf_dir']}/"
                f"{self.spark_profile}.conf (profiles are files in the Spark conf directory)"
            )
        if problems:  # one error, one line each (python -m app prints them as they are)
            raise ValueError("\n  ".join(problems))
        for key, value in updates.items():
            object.__setattr__(self, key, value)
        return self

    @property
    def output_roots(self) -> list[Path]:
        """Where batch predictions may be written: the data roots, or the caller's own space
        (:func:`app.services.spaces.for_caller`)."""
        return self._output_roots or self.data_roots

    @property
    def embedded_broker(self) -> bool:
        return self.broker_url.startswith(("sqla+", "filesystem"))

    def redacted_url(self, url: str) -> str:
        """The URL with any password replaced, for logs and ``/cluster``: the one in the user part, and query
        parameters that carry one (psycopg and redis take ``?password=``)."""
        from sqlalchemy.engine import make_url

        try:
            shown = make_url(url).render_as_string(hide_password=True)
        except Exception:
            shown = url.rsplit("@", maxsplit=1)[-1] if "@" in url else url
        return _SECRET_PARAM.sub(lambda m: m.group(1) + "***", shown)


_SECRET_PARAM = re.compile(r"([?&;](?:[^=&;#]*(?:password|passwd|pwd|secret|token|key)[^=&;#]*)=)[^&;#]*", re.I)
"""A query parameter whose name says it holds a secret (``password=``, ``sslkey=``, ``access_token=``)."""


def sqlite_file(url: str) -> Path | None:
    """The resolved file of a SQLite database or broker URL (``sqlite:///``, ``sqla+sqlite:///``); None otherwise."""
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url.removeprefix("sqla+"))
    except Exception:  # checked, and said, by the URL's own validator
        return None
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database).resolve()


def load_settings(**overrides: Any) -> Settings:
    """Read the environment (and explicit overrides) into a frozen Settings; call it at start-up only."""
    return Settings(**overrides)
