"""bench.network's shaped network: it is built, carries traffic between a worker and the driver, counts what the
worker sent, and leaves nothing behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench import netns

pytestmark = pytest.mark.skipif(
    netns.available() is not None, reason=f"no network namespaces here: {netns.available()}"
)

RECEIVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5099)); s.listen(); s.settimeout(30); print("ready", flush=True)
c, _ = s.accept(); n = 0
while (b := c.recv(1 << 20)): n += len(b)
print(n, flush=True)
"""
SENDER = """
import socket, sys
c = socket.create_connection((sys.argv[1], 5099), timeout=30)
c.sendall(b"x" * int(sys.argv[2])); c.close()
"""


def names() -> set[str]:
    return set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout.split())


def test_a_shaped_link_carries_and_counts_a_workers_bytes_and_is_removed() -> None:
    topology = netns.Topology(1, f"t{os.getpid() % 100000}")
    size = 8 << 20
    try:
        topology.up()
        topology.shape(1e9)
        before = topology.sent_bytes()
        receiver = subprocess.Popen(netns.in_namespace(topology.driver_ns, [sys.executable, "-c", RECEIVER,
                                    netns.DRIVER_IP]), stdout=subprocess.PIPE, text=True)  # fmt: skip
        assert receiver.stdout is not None and receiver.stdout.readline().strip() == "ready"
        subprocess.run(netns.in_namespace(topology.worker_ns[0], [sys.executable, "-c", SENDER, netns.DRIVER_IP,
                       str(size)]), check=True, timeout=60)  # fmt: skip
        assert int(receiver.stdout.readline()) == size
        receiver.wait(10)
        sent = topology.sent_bytes()[0] - before[0]
        assert size <= sent < size * 1.05  # the payload and its TCP/IP headers (9000-byte frames)
        qdisc = subprocess.run(["ip", "netns", "exec", topology.worker_ns[0], "tc", "qdisc", "show", "dev", "stn0"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert "tbf" in qdisc and "1Gbit" in qdisc
        topology.shape(None)
        qdisc = subprocess.run(["ip", "netns", "exec", topology.worker_ns[0], "tc", "qdisc", "show", "dev", "stn0"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert "tbf" not in qdisc
    finally:
        topology.down()
    assert not {topology.driver_ns, *topology.worker_ns} & names()
