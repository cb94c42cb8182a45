"""A shaped network for ``bench.network``: one namespace for the driver, one per Spark worker, a veth per worker.

Topology (all of it made by the benchmark, removed when it ends, also on failure)::

    driver namespace  stn-<tag>-d : bridge stnbr 10.77.0.1/24 (driver, master); stnd<i> bridged, one per worker
    worker namespaces stn-<tag>-w<i>: stn0 10.77.0.<10+i>/24, the other end of stnd<i> (worker daemon, executor)

Each worker reaches the others and the driver over its own veth, shaped in both directions with ``tbf`` (egress of
``stn0`` is what the worker sends, egress of ``stnd<i>`` what it receives): one full-duplex link of the given
rate per worker, as a worker with one NIC behind a non-blocking switch has. The bridge itself is not shaped.
(This kernel has ``tbf`` and ``htb`` but no ``netem``: no delay or loss is emulated.) The worker-side interface
has the same name in every namespace, so ``GLOO_SOCKET_IFNAME=stn0`` points every rank's gloo at its link.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

SUBNET = "10.77.0"
DRIVER_IP = f"{SUBNET}.1"
MTU = 9000  # jumbo frames, as cluster networks are usually set up
IFNAME = "stn0"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def available() -> str | None:
    """None when namespaces, veths and tbf work here; otherwise why not (the benchmark then skips shaped links)."""
    if os.geteuid() != 0:
        return "not root: network namespaces need CAP_NET_ADMIN"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "iproute2's ip and tc are not installed"
    probe = f"stn-probe-{os.getpid()}"
    try:
        _ip("netns", "add", probe)
        _ip("-n", probe, "link", "add", "p0", "type", "veth", "peer", "name", "p1")
        subprocess.run(
            [
                "ip",
                "netns",
                "exec",
                probe,
                "tc",
                "qdisc",
                "add",
                "dev",
                "p0",
                "root",
                "tbf",
                "rate",
                "1gbit",
                "burst",
                "1250000",
                "latency",
                "100ms",
            ],
            check=True,
            capture_output=True,
        )
    except (subprocess.CalledProcessError, OSError) as e:
        return f"cannot build a shaped veth: {getattr(e, 'stderr', '') or e}".strip()
    finally:
        subprocess.run(["ip", "netns", "del", probe], check=False, capture_output=True)
    return None


class Topology:
    """The namespaces and links for ``workers`` Spark workers; ``tag`` keeps two runs' names apart."""

    def __init__(self, workers: int, tag: str) -> None:
        self.workers, self.tag = workers, tag
        self.driver_ns = f"stn-{tag}-d"
        self.worker_ns = [f"stn-{tag}-w{i}" for i in range(1, workers + 1)]

    def worker_ip(self, i: int) -> str:
        return f"{SUBNET}.{10 + i}"

    def up(self) -> None:
        d = self.driver_ns
        _ip("netns", "add", d)
        _ip("-n", d, "link", "set", "lo", "up")
        _ip("-n", d, "link", "add", "stnbr", "mtu", str(MTU), "type", "bridge")
        _ip("-n", d, "addr", "add", f"{DRIVER_IP}/24", "dev", "stnbr")
        _ip("-n", d, "link", "set", "stnbr", "up")
        for i, ns in enumerate(self.worker_ns, start=1):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip(
                "-n",
                d,
                "link",
                "add",
                f"stnd{i}",
                "mtu",
                str(MTU),
                "type",
                "veth",
                "peer",
                "name",
                IFNAME,
                "mtu",
                str(MTU),
                "netns",
                ns,
            )
            _ip("-n", d, "link", "set", f"stnd{i}", "master", "stnbr", "up")
            _ip("-n", ns, "addr", "add", f"{self.worker_ip(i)}/24", "dev", IFNAME)
            _ip("-n", ns, "link", "set", IFNAME, "up")

    def shape(self, rate_bits: float | None) -> None:
        """Every worker's link at ``rate_bits`` per second each way; None removes the shaping."""
        for i, ns in enumerate(self.worker_ns, start=1):
            for namespace, dev in ((ns, IFNAME), (self.driver_ns, f"stnd{i}")):
                tc = ["ip", "netns", "exec", namespace, "tc", "qdisc"]
                if rate_bits is None:
                    subprocess.run(
                        [*tc, "del", "dev", dev, "root"], check=False, capture_output=True
                    )  # none there is fine
                    continue
                burst = max(int(rate_bits / 8 / 100), 2 * MTU + 1024)  # 10 ms of traffic at the rate
                subprocess.run(
                    [
                        *tc,
                        "replace",
                        "dev",
                        dev,
                        "root",
                        "tbf",
                        "rate",
                        f"{int(rate_bits)}bit",
                        "burst",
                        str(burst),
                        "latency",
                        "100ms",
                    ],
                    check=True,
                    capture_output=True,
                )

    def sent_bytes(self) -> list[int]:
        """What each worker has put on its link so far: the kernel's receive counter of the driver-side end."""
        out = []
        for i in range(1, self.workers + 1):
            text = subprocess.run(
                ["ip", "netns", "exec", self.driver_ns, "cat", f"/sys/class/net/stnd{i}/statistics/rx_bytes"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            out.append(int(text))
        return out

    def down(self) -> None:
        """Kills whatever still runs in the namespaces, then removes them (the veths and bridge go with them)."""
        for ns in [*self.worker_ns, self.driver_ns]:
            pids = subprocess.run(
                ["ip", "netns", "pids", ns], check=False, capture_output=True, text=True
            ).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def in_namespace(ns: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


class Cluster:
    """A Spark standalone master in the driver namespace and one 1-core worker in each worker namespace."""

    def __init__(self, topology: Topology, python: str, work: Path, memory: str = "3g") -> None:
        self.topology, self.python, self.work, self.memory = topology, python, work, memory
        self.procs: list[subprocess.Popen[bytes]] = []
        self.master = f"spark://{DRIVER_IP}:7077"

    def _spark_class(self, ns: str, ip: str, args: list[str], log: Path) -> None:
        import pyspark

        home = os.path.dirname(pyspark.__file__)
        repo = Path(__file__).resolve().parents[1]
        env = {
            **os.environ,
            "SPARK_HOME": home,
            "SPARK_CONF_DIR": str(repo / "spark-conf"),
            "SPARK_LOCAL_IP": ip,
            "PYSPARK_PYTHON": self.python,
            "GLOO_SOCKET_IFNAME": IFNAME,
            "SPARK_LOG_DIR": str(self.work),
        }
        with log.open("wb") as out:
            self.procs.append(
                subprocess.Popen(
                    in_namespace(ns, [f"{home}/bin/spark-class", *args]),
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def start(self, timeout_s: float = 90) -> None:
        t = self.topology
        self.work.mkdir(parents=True, exist_ok=True)
        self._spark_class(
            t.driver_ns,
            DRIVER_IP,
            ["org.apache.spark.deploy.master.Master", "--host", DRIVER_IP, "--port", "7077", "--webui-port", "7078"],
            self.work / "master.log",
        )
        for i, ns in enumerate(t.worker_ns, start=1):
            ip = t.worker_ip(i)
            self._spark_class(
                ns,
                ip,
                [
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    ip,
                    "--cores",
                    "1",
                    "--memory",
                    self.memory,
                    "--work-dir",
                    str(self.work / f"w{i}"),
                    self.master,
                ],
                self.work / f"worker{i}.log",
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.alive_workers() == t.workers:
                return
            time.sleep(1)
        raise RuntimeError(f"{t.workers} workers did not register with {self.master}; see {self.work}/*.log")

    def alive_workers(self) -> int:
        probe = (
            f"import json, urllib.request; print(json.load(urllib.request.urlopen("
            f"'http://{DRIVER_IP}:7078/json/', timeout=2))['aliveworkers'])"
        )
        out = subprocess.run(
            in_namespace(self.topology.driver_ns, [self.python, "-c", probe]),
            check=False,
            capture_output=True,
            text=True,
        )
        return int(out.stdout.strip()) if out.returncode == 0 and out.stdout.strip() else 0

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        self.procs.clear()
