"""``GET /cluster`` says whether a standalone master answers (``master_reachable``): with the master killed it looked
healthy, and only ``/readyz`` (once executors were gone) or the driver's log said so. Null on masters that are not
standalone ones; a real listening socket stands in for a master's port (a SparkSession against an unreachable
master would take minutes to give up)."""

from __future__ import annotations

import socket

from app.services.health import master_reachable
from tests.helpers import Service, free_port


def test_a_local_master_has_no_master_to_reach(service: Service) -> None:
    cluster = service.client.get("/cluster").json()
    assert cluster["master"] == "local[2]"
    assert "master_reachable" in cluster and cluster["master_reachable"] is None


def test_a_standalone_master_is_reachable_while_its_port_accepts_connections() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert master_reachable(f"spark://127.0.0.1:{port}") is True
        assert master_reachable(f"spark://127.0.0.1:{free_port()},127.0.0.1:{port}") is True, "a standby answers"
    assert master_reachable(f"spark://127.0.0.1:{port}") is False
    assert master_reachable("k8s://https://10.0.0.1:6443") is None
