"""Spark profiles: a ``spark-conf/<name>.conf`` applied on top of ``spark-defaults.conf`` at start-up
(``SPARKTRAIN_SPARK_PROFILE``), such as ``gpu``, the RAPIDS Accelerator profile.

:func:`plan_profile` decides, without side effects, which of the profile's keys this driver can apply:

- the RAPIDS keys (``spark.plugins``, ``spark.rapids.*`` and anything naming a ``com.nvidia.spark`` class) only
  when the RAPIDS jar is there, and then with the jar on ``spark.jars`` and the driver's class path. Without it
  the session starts on CPU and the reason is recorded for ``/cluster`` and the jobs;
- the GPU scheduling keys (``spark.{executor,task}.resource.gpu.*``) only on a cluster master: ``local[*]`` never
  hands GPU addresses to tasks, so ``spark.task.resource.gpu.amount`` would leave every task waiting for ever.
  On a local master the GPUs the discovery script finds on this host become the driver's resources instead;
- everything else as written.

:func:`resolve_profile` gathers what the plan depends on (the file, the jar, this host's GPUs).
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from app.core.settings import Settings
from workers.cluster import PROFILE_KEY, RAPIDS_JAR_KEY, RAPIDS_OFF_KEY, RAPIDS_PLUGIN

log = logging.getLogger(__name__)

RAPIDS_DIR = Path("/opt/sparkRapidsPlugin")
RAPIDS_JAR_GLOB = "rapids-4-spark_*.jar"
RAPIDS_JAR_ENV = "SPARK_RAPIDS_JAR"
DISCOVERY_SCRIPT = "getGpusResources.sh"


_LIST_KEYS = ("spark.jars", "spark.plugins", "spark.kryo.registrator")
"""Comma-separated lists: a profile's entries and the operator's own (``SPARKTRAIN_SPARK_CONF``) are merged."""
_GPU_SCHEDULING = re.compile(r"^spark\.(executor|task)\.resource\.gpu\.")
_JAR_VERSION = re.compile(r"^rapids-4-spark_[0-9.]+-(?P<version>[0-9][0-9A-Za-z.]*?)(?:-cuda[0-9]+)?\.jar$")


@dataclass(frozen=True)
class JarSearch:
    """The RAPIDS jar found (or not) and where it was looked for, for messages."""

    jar: Path | None
    looked_at: str


@dataclass(frozen=True)
class ProfilePlan:
    name: str | None
    conf: dict[str, str]
    """Keys to set on the SparkSession builder (before ``SPARKTRAIN_SPARK_CONF``)."""
    rapids_jar: Path | None
    plugin: bool
    """Whether ``conf`` loads the RAPIDS plugin."""
    plugin_off: str | None
    """Why the plugin is not loaded (a sentence), None when it is."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Profile keys left out, with the reason."""


def read_conf_file(path: Path) -> dict[str, str]:
    """``spark-defaults.conf`` syntax: ``key value`` (or ``key=value``) lines, ``#`` comments."""
    conf: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        match = re.match(r"^([^\s=:]+)\s*[=:\s]\s*(.*)$", line)
        if match is None:
            raise ValueError(f"{path}:{number}: expected 'key value', got {line!r}")
        conf[match.group(1)] = match.group(2).strip()
    return conf


def _jar_version(path: Path) -> Version:
    match = _JAR_VERSION.match(path.name)
    try:
        return Version(match.group("version")) if match else Version("0")
    except InvalidVersion:
        return Version("0")


def find_rapids_jar(
    explicit: Path | None, env: Mapping[str, str], search_dirs: Sequence[Path] = (RAPIDS_DIR,)
) -> JarSearch:
    """The RAPIDS Accelerator jar: the given path, else ``$SPARK_RAPIDS_JAR``, else the newest
    ``rapids-4-spark_*.jar`` in ``search_dirs``. A named path that does not exist is not replaced by a search."""
    named = explicit or (Path(env[RAPIDS_JAR_ENV]) if env.get(RAPIDS_JAR_ENV) else None)
    if named is not None:
        return JarSearch(named if named.is_file() else None, str(named))
    found = [p for d in search_dirs for p in d.glob(RAPIDS_JAR_GLOB) if p.is_file()]
    looked_at = ", ".join(str(d / RAPIDS_JAR_GLOB) for d in search_dirs)
    if not found:
        return JarSearch(None, looked_at)
    return JarSearch(max(found, key=lambda p: (_jar_version(p), p.name)), looked_at)


def is_local_master(master: str) -> bool:
    """``local``, ``local[4]``, ``local[*]``; not ``local-cluster[...]``, whose executors do schedule GPUs."""
    return master == "local" or master.startswith("local[")


def _in_conf_dir(path: str, conf_dir: Path) -> Path:
    """A relative script path in a profile names a file in the Spark conf directory."""
    return Path(path) if Path(path).is_absolute() else conf_dir / path


def discovery_script(conf: Mapping[str, str], conf_dir: Path) -> Path:
    """The executors' GPU discovery script (default: ``getGpusResources.sh`` in the conf directory)."""
    return _in_conf_dir(conf.get("spark.executor.resource.gpu.discoveryScript", DISCOVERY_SCRIPT), conf_dir)


def discover_gpus(script: Path, timeout_s: float = 15.0) -> tuple[list[str], str | None]:
    """Run a Spark GPU discovery script on this host: (addresses, None) or ([], what went wrong)."""
    try:
        done = subprocess.run([str(script)], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"{script} could not run ({type(exc).__name__}: {exc})"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [], f"{script} exited with {done.returncode}: {last}"
    try:
        addresses = [str(a) for a in json.loads(done.stdout)["addresses"] if str(a)]
    except (ValueError, KeyError, TypeError):
        return [], f"{script} printed {done.stdout.strip()[:200]!r}, not Spark's resource JSON"
    return addresses, None if addresses else f"{script} found no GPU"


def _is_rapids_key(key: str, value: str) -> bool:
    return key.startswith("spark.rapids.") or RAPIDS_PLUGIN in value or "com.nvidia.spark" in value


def _without_plugin(value: str) -> str:
    return ",".join(v for v in (p.strip() for p in value.split(",")) if v and "com.nvidia.spark" not in v)


def plan_profile(
    *,
    name: str | None,
    profile_conf: Mapping[str, str],
    conf_dir: Path,
    master: str,
    jar: JarSearch,
    local_gpus: Sequence[str] | None = None,
    local_gpus_problem: str | None = None,
) -> ProfilePlan:
    """What to apply of a profile. ``local_gpus`` are the addresses the discovery script found on this host
    (asked on local masters only; None when not asked)."""
    if not name:
        hint = "no Spark profile enables it (start the driver with SPARKTRAIN_SPARK_PROFILE=gpu)"
        if jar.jar is None:
            hint = f"the RAPIDS plugin is not configured: no jar found at {jar.looked_at}, and {hint}"
        else:
            hint = f"the RAPIDS plugin is not configured: the jar {jar.jar} is there but {hint}"
        return ProfilePlan(name=None, conf={}, rapids_jar=jar.jar, plugin=False, plugin_off=hint)

    local = is_local_master(master)
    wants_plugin = RAPIDS_PLUGIN in profile_conf.get("spark.plugins", "")
    off: str | None = None
    if not wants_plugin:
        off = f"the RAPIDS plugin is not configured: profile {name!r} does not list {RAPIDS_PLUGIN} in spark.plugins"
    elif jar.jar is None:
        elsewhere = "; SPARKTRAIN_RAPIDS_JAR or SPARK_RAPIDS_JAR names one elsewhere" if "*" in jar.looked_at else ""
        off = f"the RAPIDS plugin is not configured (no jar found at {jar.looked_at}{elsewhere})"
    elif local and not local_gpus:
        off = (
            f"the RAPIDS plugin is left off: the master is {master} and this host shows no GPU "
            f"({local_gpus_problem or 'the discovery script found none'})"
        )
    plugin = off is None

    conf: dict[str, str] = {}
    skipped: dict[str, str] = {}
    for key, value in profile_conf.items():
        if _is_rapids_key(key, value) and not plugin:
            if key in _LIST_KEYS and _without_plugin(value):
                conf[key] = _without_plugin(value)
            else:
                skipped[key] = off or ""
        elif _GPU_SCHEDULING.match(key) and local:
            skipped[key] = f"{master} does not give GPUs to tasks; a GPU amount per task would stall every task"
        elif key.endswith(".discoveryScript"):
            conf[key] = str(_in_conf_dir(value, conf_dir))
        else:
            conf[key] = value
    if plugin:
        assert jar.jar is not None
        conf["spark.jars"] = merge_list(conf.get("spark.jars"), str(jar.jar))
        conf["spark.driver.extraClassPath"] = str(jar.jar)
    if local and local_gpus:
        # local[*] runs tasks in the driver: its GPUs are the ones Spark (and the plugin) know of
        conf["spark.driver.resource.gpu.amount"] = str(len(local_gpus))
        conf["spark.driver.resource.gpu.discoveryScript"] = str(discovery_script(profile_conf, conf_dir))
    return ProfilePlan(name=name, conf=conf, rapids_jar=jar.jar, plugin=plugin, plugin_off=off, skipped=skipped)


def merge_list(first: str | None, second: str | None) -> str:
    """Two comma-separated lists as one, in order, without repeats."""
    items = [p.strip() for v in (first, second) if v for p in v.split(",")]
    return ",".join(dict.fromkeys(p for p in items if p))


def merge_conf(profile: Mapping[str, str], overrides: Mapping[str, str]) -> dict[str, str]:
    """The profile's keys, then the operator's: list-valued keys are joined, any other key is replaced."""
    merged = dict(profile)
    for key, value in overrides.items():
        merged[key] = merge_list(merged.get(key), value) if key in _LIST_KEYS else value
    return merged


def resolve_profile(settings: Settings, env: Mapping[str, str] | None = None) -> ProfilePlan:
    """Read the selected profile, look for the RAPIDS jar and, on a local master, for this host's GPUs."""
    env = os.environ if env is None else env
    jar = find_rapids_jar(settings.rapids_jar, env)
    if not settings.spark_profile:
        return plan_profile(name=None, profile_conf={}, conf_dir=settings.spark_conf_dir, master="", jar=jar)
    profile_conf = read_conf_file(settings.spark_conf_dir / f"{settings.spark_profile}.conf")
    master = settings.spark_conf.get("spark.master", settings.spark_master)
    gpus: list[str] | None = None
    problem: str | None = None
    if is_local_master(master):
        gpus, problem = discover_gpus(discovery_script(profile_conf, settings.spark_conf_dir))
    plan = plan_profile(
        name=settings.spark_profile,
        profile_conf=profile_conf,
        conf_dir=settings.spark_conf_dir,
        master=master,
        jar=jar,
        local_gpus=gpus,
        local_gpus_problem=problem,
    )
    if plan.plugin_off is not None and RAPIDS_PLUGIN in profile_conf.get("spark.plugins", ""):
        log.warning("Spark profile %s: %s; Spark SQL runs on the CPU", plan.name, plan.plugin_off)
    for key, why in plan.skipped.items():
        log.info("Spark profile %s: %s not applied: %s", plan.name, key, why)
    return plan


def recorded_keys(plan: ProfilePlan) -> dict[str, str]:
    """The ``spark.sparktrain.*`` keys that let the live session explain itself (see ``workers.cluster``)."""
    keys = {PROFILE_KEY: plan.name or ""}
    if plan.rapids_jar is not None:
        keys[RAPIDS_JAR_KEY] = str(plan.rapids_jar)
    if plan.plugin_off is not None:
        keys[RAPIDS_OFF_KEY] = plan.plugin_off
    return keys
