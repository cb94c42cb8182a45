"""Spark profiles: what the gpu profile applies with and without the RAPIDS jar, on local and cluster masters."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.core.settings import REPO_ROOT, Settings
from app.spark.profile import (
    RAPIDS_OFF_KEY,
    RAPIDS_PLUGIN,
    JarSearch,
    discover_gpus,
    find_rapids_jar,
    is_local_master,
    merge_conf,
    plan_profile,
    read_conf_file,
    recorded_keys,
    resolve_profile,
)

CONF_DIR = REPO_ROOT / "spark-conf"
GPU_CONF = read_conf_file(CONF_DIR / "gpu.conf")
SCRIPT = CONF_DIR / "getGpusResources.sh"


def _rapids_keys(conf: dict[str, str]) -> set[str]:
    return {k for k, v in conf.items() if k.startswith("spark.rapids.") or "com.nvidia" in v}


def _gpu_scheduling_keys(conf: dict[str, str]) -> set[str]:
    return {k for k in conf if k.startswith(("spark.executor.resource.gpu.", "spark.task.resource.gpu."))}


@pytest.fixture
def fake_jar(tmp_path: Path) -> Path:
    jar = tmp_path / "rapids-4-spark_2.13-25.02.1.jar"
    jar.write_bytes(b"PK\x05\x06" + bytes(18))  # an empty zip: present, never loaded by these tests
    return jar


def test_gpu_profile_has_the_article_settings() -> None:
    assert GPU_CONF["spark.plugins"] == RAPIDS_PLUGIN
    assert GPU_CONF["spark.rapids.sql.enabled"] == "true"
    assert GPU_CONF["spark.rapids.memory.pinnedPool.size"] == "2g"
    assert GPU_CONF["spark.sql.files.maxPartitionBytes"] == "512m"
    assert GPU_CONF["spark.executor.resource.gpu.amount"] == "1"
    assert GPU_CONF["spark.task.resource.gpu.amount"] == "1"
    assert GPU_CONF["spark.executor.resource.gpu.discoveryScript"] == "getGpusResources.sh"
    assert int(GPU_CONF["spark.rapids.sql.concurrentGpuTasks"]) >= 1
    # every setting is documented: the lines above it, up to the previous blank line, include a comment
    block_commented = False
    for line in (CONF_DIR / "gpu.conf").read_text().splitlines():
        if not line.strip():
            block_commented = False
        elif line.startswith("#"):
            block_commented = True
        else:
            assert block_commented, f"no comment above {line!r}"


def test_without_a_jar_the_plugin_stays_off(tmp_path: Path) -> None:
    missing = JarSearch(None, "/opt/sparkRapidsPlugin/rapids-4-spark_*.jar")
    plan = plan_profile(name="gpu", profile_conf=GPU_CONF, conf_dir=CONF_DIR, master="spark://m:7077", jar=missing)
    assert not plan.plugin
    assert (
        plan.plugin_off
        == "the RAPIDS plugin is not configured (no jar found at /opt/sparkRapidsPlugin/rapids-4-spark_*.jar; "
        "SPARKTRAIN_RAPIDS_JAR or SPARK_RAPIDS_JAR names one elsewhere)"
    )
    assert _rapids_keys(plan.conf) == set()
    assert "spark.plugins" not in plan.conf and "spark.jars" not in plan.conf
    assert set(plan.skipped) >= {"spark.plugins", "spark.rapids.sql.enabled", "spark.kryo.registrator"}
    # the rest of the profile still applies: GPU scheduling on a cluster, input splits
    assert plan.conf["spark.sql.files.maxPartitionBytes"] == "512m"
    assert plan.conf["spark.task.resource.gpu.amount"] == "1"
    assert recorded_keys(plan)[RAPIDS_OFF_KEY] == plan.plugin_off


def test_with_a_jar_on_a_cluster_the_plugin_keys_apply(fake_jar: Path) -> None:
    plan = plan_profile(
        name="gpu",
        profile_conf=GPU_CONF,
        conf_dir=CONF_DIR,
        master="spark://m:7077",
        jar=JarSearch(fake_jar, str(fake_jar)),
    )
    assert plan.plugin and plan.plugin_off is None and plan.skipped == {}
    assert plan.conf["spark.plugins"] == RAPIDS_PLUGIN
    assert plan.conf["spark.rapids.sql.enabled"] == "true"
    assert plan.conf["spark.rapids.memory.pinnedPool.size"] == "2g"
    assert plan.conf["spark.kryo.registrator"] == "com.nvidia.spark.rapids.GpuKryoRegistrator"
    assert plan.conf["spark.jars"] == str(fake_jar)
    assert plan.conf["spark.driver.extraClassPath"] == str(fake_jar)
    assert plan.conf["spark.executor.resource.gpu.amount"] == "1"
    assert plan.conf["spark.executor.resource.gpu.discoveryScript"] == str(SCRIPT)
    assert "spark.driver.resource.gpu.amount" not in plan.conf  # a cluster's driver needs no GPU
    assert RAPIDS_OFF_KEY not in recorded_keys(plan)


def test_local_master_with_gpus_gives_them_to_the_driver(fake_jar: Path) -> None:
    plan = plan_profile(
        name="gpu",
        profile_conf=GPU_CONF,
        conf_dir=CONF_DIR,
        master="local[*]",
        jar=JarSearch(fake_jar, str(fake_jar)),
        local_gpus=["0", "1"],
    )
    assert plan.plugin
    assert plan.conf["spark.plugins"] == RAPIDS_PLUGIN
    assert plan.conf["spark.driver.resource.gpu.amount"] == "2"
    assert plan.conf["spark.driver.resource.gpu.discoveryScript"] == str(SCRIPT)
    # local[*] never hands GPUs to tasks: a GPU amount per task would stall every task
    assert _gpu_scheduling_keys(plan.conf) == set()
    assert "stall" in plan.skipped["spark.task.resource.gpu.amount"]


def test_local_master_without_gpus_leaves_the_plugin_off(fake_jar: Path) -> None:
    plan = plan_profile(
        name="gpu",
        profile_conf=GPU_CONF,
        conf_dir=CONF_DIR,
        master="local[2]",
        jar=JarSearch(fake_jar, str(fake_jar)),
        local_gpus=[],
        local_gpus_problem="getGpusResources.sh exited with 1: nvidia-smi not found",
    )
    assert not plan.plugin
    assert plan.plugin_off is not None and "nvidia-smi not found" in plan.plugin_off
    assert _rapids_keys(plan.conf) == set() and _gpu_scheduling_keys(plan.conf) == set()
    assert "spark.driver.resource.gpu.amount" not in plan.conf
    assert plan.conf["spark.sql.files.maxPartitionBytes"] == "512m"


def test_no_profile_applies_nothing_and_says_how_to_enable(fake_jar: Path) -> None:
    none = plan_profile(
        name=None, profile_conf={}, conf_dir=CONF_DIR, master="local[2]", jar=JarSearch(None, "/x/*.jar")
    )
    assert none.conf == {} and not none.plugin
    assert none.plugin_off is not None
    assert "no jar found at /x/*.jar" in none.plugin_off and "SPARKTRAIN_SPARK_PROFILE=gpu" in none.plugin_off
    found = plan_profile(name=None, profile_conf={}, conf_dir=CONF_DIR, master="local[2]", jar=JarSearch(fake_jar, ""))
    assert found.rapids_jar == fake_jar and str(fake_jar) in (found.plugin_off or "")


def test_other_plugins_survive_when_rapids_is_off() -> None:
    conf = {"spark.plugins": f"org.example.Other,{RAPIDS_PLUGIN}", "spark.rapids.sql.enabled": "true"}
    plan = plan_profile(name="p", profile_conf=conf, conf_dir=CONF_DIR, master="local[2]", jar=JarSearch(None, "x"))
    assert plan.conf == {"spark.plugins": "org.example.Other"}


def test_operator_settings_win_and_lists_merge() -> None:
    profile = {"spark.jars": "/a.jar", "spark.plugins": RAPIDS_PLUGIN, "spark.sql.files.maxPartitionBytes": "512m"}
    merged = merge_conf(profile, {"spark.jars": "/b.jar,/a.jar", "spark.sql.files.maxPartitionBytes": "128m"})
    assert merged == {
        "spark.jars": "/a.jar,/b.jar",
        "spark.plugins": RAPIDS_PLUGIN,
        "spark.sql.files.maxPartitionBytes": "128m",
    }


def test_find_rapids_jar(tmp_path: Path, fake_jar: Path) -> None:
    plugin_dir = tmp_path / "plugin"
    plugin_dir.mkdir()
    for name in (
        "rapids-4-spark_2.13-9.8.0.jar",
        "rapids-4-spark_2.13-25.02.0-cuda12.jar",
        "rapids-4-spark-tools_2.13-99.0.jar",
    ):
        (plugin_dir / name).write_bytes(b"")
    newest = find_rapids_jar(None, {}, [plugin_dir])
    assert newest.jar == plugin_dir / "rapids-4-spark_2.13-25.02.0-cuda12.jar"  # by version, not by name
    assert find_rapids_jar(None, {}, [tmp_path / "empty"]) == JarSearch(None, f"{tmp_path}/empty/rapids-4-spark_*.jar")
    assert find_rapids_jar(None, {"SPARK_RAPIDS_JAR": str(fake_jar)}, [plugin_dir]).jar == fake_jar
    # a named jar that is missing is reported, not replaced by whatever the search finds
    missing = tmp_path / "nope.jar"
    assert find_rapids_jar(missing, {"SPARK_RAPIDS_JAR": str(fake_jar)}, [plugin_dir]) == JarSearch(None, str(missing))


def test_masters() -> None:
    assert is_local_master("local") and is_local_master("local[2]") and is_local_master("local[*]")
    assert not is_local_master("local-cluster[2,1,1024]") and not is_local_master("spark://m:7077")


def test_discovery_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    smi = fake / "nvidia-smi"
    smi.write_text("#!/usr/bin/env bash\nprintf '0\\n1\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    out = subprocess.run([str(SCRIPT)], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"name": "gpu", "addresses": ["0", "1"]}
    assert discover_gpus(SCRIPT) == (["0", "1"], None)
    smi.write_text("#!/usr/bin/env bash\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    addresses, problem = discover_gpus(SCRIPT)
    assert addresses == [] and problem is not None and "NVIDIA-SMI has failed" in problem


def test_settings_check_the_profile_exists(tmp_path: Path) -> None:
    assert Settings(var_dir=tmp_path, spark_profile="gpu").spark_profile == "gpu"
    with pytest.raises(ValidationError, match=r"no .*/spark-conf/nope\.conf"):
        Settings(var_dir=tmp_path, spark_profile="nope")
    with pytest.raises(ValidationError):
        Settings(var_dir=tmp_path, spark_profile="../etc/passwd")


def test_resolve_warns_naming_the_missing_jar(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    missing = tmp_path / "rapids-4-spark_2.13-25.02.0.jar"
    settings = Settings(var_dir=tmp_path, spark_profile="gpu", spark_master="spark://m:7077", rapids_jar=missing)
    with caplog.at_level(logging.WARNING, logger="app.spark.profile"):
        plan = resolve_profile(settings, env={})
    assert not plan.plugin and "spark.plugins" not in plan.conf
    assert str(missing) in caplog.text


@pytest.mark.slow
def test_gpu_profile_session_starts_without_the_jar(tmp_path: Path) -> None:
    """A real driver JVM with SPARKTRAIN_SPARK_PROFILE=gpu and no jar: it starts, runs a job, and says why the
    plugin is off (a subprocess: this process already has its SparkSession)."""
    code = textwrap.dedent(
        f"""
        import json
        from app.core.settings import Settings
        from workers.cluster import rapids_status
        from app.spark.session import build_spark_session
        settings = Settings(var_dir={str(tmp_path)!r}, spark_master="local[1]", spark_profile="gpu",
                            rapids_jar={str(tmp_path / "missing.jar")!r}, spark_conf={{"spark.ui.enabled": "false"}})
        spark = build_spark_session(settings)
        conf = spark.sparkContext.getConf()
        print(json.dumps({{"count": spark.range(10).count(), "rapids": rapids_status(spark),
                          "task_gpu": conf.get("spark.task.resource.gpu.amount"),
                          "max_partition_bytes": conf.get("spark.sql.files.maxPartitionBytes")}}))
        spark.stop()
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("SPARK_RAPIDS_JAR", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["count"] == 10
    assert report["task_gpu"] is None  # not on a local master
    assert report["max_partition_bytes"] == "512m"
    rapids = report["rapids"]
    assert rapids["profile"] == "gpu" and not rapids["configured"] and not rapids["active"]
    assert rapids["reason"] == f"the RAPIDS plugin is not configured (no jar found at {tmp_path / 'missing.jar'})"
