"""Whether a standalone master answers: with the master killed, ``/readyz`` and ``/cluster`` looked healthy for
3.5 minutes, and only the driver's log said "Disconnected from Spark cluster" (walkthrough on a standalone cluster,
2026-12-07). A real listening socket stands in for the master's port."""

from __future__ import annotations

import socket

from app.services.health import master_state
from tests.helpers import free_port


def test_a_master_that_accepts_connections_is_ok_and_one_that_refuses_is_unreachable() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert master_state(f"spark://127.0.0.1:{port}") == "ok"
        assert master_state(f"spark://127.0.0.1:{free_port()},127.0.0.1:{port}") == "ok", "a standby answers"
    gone = master_state(f"spark://127.0.0.1:{port}")
    assert gone.startswith("unreachable: the Spark master spark://*** does not answer (ConnectionRefusedError)"), gone
    assert "a lost executor is not replaced until it is back" in gone


def test_other_masters_are_not_asked() -> None:
    assert master_state("local[2]") == master_state("k8s://https://10.0.0.1:6443") == "n/a"
