"""What this process's TCP sockets have sent, from the kernel (``ss -tinp``: tcp_info's ``bytes_sent``).

Payload bytes handed to TCP, retransmissions included, TCP/IP headers not: the real count that the trainer's
wire accounting (``workers/training/torch/comm.py``) is checked against.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

_SENT = re.compile(r"\bbytes_sent:(\d+)")


def _ss() -> str:
    return subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True, timeout=30).stdout


def tcp_bytes_sent(pid: int | None = None) -> int:
    """Sum of ``bytes_sent`` over the established TCP sockets that process ``pid`` (default: this one) holds."""
    mine = f"pid={pid or os.getpid()},"
    total, owned = 0, False
    for line in _ss().splitlines():
        if line and not line[0].isspace():
            owned = mine in line
            found = _SENT.search(line)  # some ss versions print the info on the socket's own line
            if owned and found:
                total += int(found.group(1))
        elif owned:
            found = _SENT.search(line)
            if found:
                total += int(found.group(1))
    return total


def ss_available() -> bool:
    if shutil.which("ss") is None:
        return False
    try:
        _ss()
    except (OSError, subprocess.SubprocessError):
        return False
    return True
