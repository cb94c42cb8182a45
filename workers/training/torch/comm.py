"""Collectives between the training workers (torch.distributed over gloo on CPU, NCCL on CUDA).

Every collective counts what this rank puts on the wire (``wire_bytes``), from what the algorithm sends
(:func:`ring_allgather_bytes`, :func:`ring_allreduce_bytes`): payload with its padding, the length exchange, the
flags, every hop of the ring, and gloo's TCP framing of each send and receive. Not counted: TCP/IP headers and
the TCPStore traffic of the rendezvous. The count is checked against the kernel's per-socket counters in
``tests/workers/training/torch/test_many_workers.py``; under NCCL it is the same ring model, not measured.

Executor-side: imports only torch. Rendezvous goes through a TCPStore on a port the OS picks (no probe-then-bind
race): in a job the driver opens it for the stage and every rank joins it (:func:`join_store`); a task run by hand
has rank 0 open it, and the port reaches the other ranks through the caller. Every collective has a timeout, so a
lost peer fails the stage instead of hanging it.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

GLOO_MAX_SEGMENT_BYTES = 1 << 20
"""gloo's ``AllreduceOptionsImpl::kMaxSegmentSize``: the ring all-reduce sends segments of at most 1 MiB."""


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _round_up(a: int, multiple: int) -> int:
    return _ceil_div(a, multiple) * multiple


GLOO_SEND_FRAME_BYTES = 96
"""What gloo's TCP transport adds to each send of an unbound buffer: the operation's 48-byte preamble and a
48-byte notice that the send is ready. Measured (tcp_info's bytes_sent around 50 collectives at W = 2 and 3,
torch 2.13): 96 per send plus 48 per receive, exactly, for all-gathers and all-reduces of 8 B to 40 kB (a 4 MB
all-reduce showed a few hundred bytes more per operation, 0.0004%)."""
GLOO_RECV_FRAME_BYTES = 48
"""The 48-byte notice a receiving rank sends its peer that a receive is posted."""


def ring_allgather_bytes(nbytes: int, world_size: int, *, framing: bool = True) -> int:
    """Bytes one rank sends in gloo's ring all-gather (``gloo/allgather.cc``) of ``nbytes`` per rank: W - 1 hops of
    its block, each as two halves (2(W - 1) sends and as many receives, each framed)."""
    if world_size < 2:
        return 0
    ops = 2 * (world_size - 1)
    frames = ops * (GLOO_SEND_FRAME_BYTES + GLOO_RECV_FRAME_BYTES) if framing else 0
    return (world_size - 1) * nbytes + frames


def ring_allreduce_bytes(nbytes: int, element_size: int, world_size: int, rank: int, *, framing: bool = True) -> int:
    """Bytes ``rank`` sends in gloo's ring all-reduce (``gloo/allreduce.cc``, ``ring``) of ``nbytes``.

    The buffer is cut into ``S`` segments (a multiple of W, at least 2W, at most 1 MiB each, rounded up to whole
    elements); reduce-scatter and all-gather each send ``S - S/W`` of them, and segments past the end of the
    buffer are short or empty (an empty one is neither sent nor received). About ``2(W-1)/W · nbytes`` for large
    buffers; for small ones the uneven split and the framing dominate, which is why this follows the algorithm
    instead of the formula.
    """
    if world_size < 2 or nbytes == 0:
        return 0
    max_segment = element_size * max(1, GLOO_MAX_SEGMENT_BYTES // element_size)
    segments = _round_up(max(_ceil_div(nbytes, max_segment), 2 * world_size), world_size)
    per_rank = segments // world_size
    segment_bytes = _round_up(_ceil_div(nbytes, segments), element_size)
    span = segments * segment_bytes

    def lengths(first: int) -> list[int]:
        """The lengths of the segments one phase moves, starting at segment ``first``."""
        return [
            max(0, min(segment_bytes, nbytes - ((first + i) * segment_bytes) % span))
            for i in range(segments - per_rank)
        ]

    sends = lengths((rank + 1) * per_rank) + lengths(rank * per_rank)  # reduce-scatter, then all-gather
    recvs = lengths((rank + 2) * per_rank) + lengths((rank + 1) * per_rank)
    total = sum(sends)
    if framing:
        total += GLOO_SEND_FRAME_BYTES * sum(1 for n in sends if n) + GLOO_RECV_FRAME_BYTES * sum(1 for n in recvs if n)
    return total


def dense_is_cheaper(longest: int, dense_bytes: int, world_size: int) -> bool:
    """Gradient sharing's per-step choice (``collective: "auto"``): True when a dense ring all-reduce of the decoded
    sum (``dense_bytes``, float32) puts fewer bytes on the wire, summed over the ranks, than the all-gather of the
    messages padded to the ``longest``. Every rank knows every length after the length exchange, so every rank
    decides the same. For a bitmap (N/4 bytes) against 4N that is W > 32; the framing makes a tiny model
    (a few parameters, whose short buffer leaves most ring segments empty) dense already at W = 3."""
    if world_size < 2:
        return False
    sparse = world_size * ring_allgather_bytes(longest, world_size)
    return dense_ring_total(dense_bytes, world_size) < sparse


def dense_ring_total(dense_bytes: int, world_size: int) -> int:
    """What a ring all-reduce of ``dense_bytes`` (float32) puts on the wire, summed over the ranks."""
    return sum(ring_allreduce_bytes(dense_bytes, 4, world_size, r) for r in range(world_size))


def open_store(host: str, world_size: int, timeout_s: float, port: int | None = None) -> dist.TCPStore:
    """A rendezvous store (the driver's for a job, or rank 0's), on ``port`` or a free one (its ``port``
    attribute), listening on ``host``'s address only: torch's own store server listens on every interface, so with
    ``SPARK_LOCAL_IP=127.0.0.1`` a job's store was open to the network."""
    timeout = timedelta(seconds=timeout_s)
    bound = _listening(host, port or 0)
    if bound is None:  # not an address of this machine (an advertised, NAT'd one): torch's store, as before
        return dist.TCPStore(host, port or 0, world_size, is_master=True, timeout=timeout, wait_for_workers=False)
    fd, at = bound
    return dist.TCPStore(host, at, world_size, is_master=True, timeout=timeout, wait_for_workers=False,
                         master_listen_fd=fd)  # fmt: skip


def _listening(host: str, port: int) -> tuple[int, int] | None:
    """(file descriptor, port) of a socket listening on ``host``'s first address, for the store to own; None when
    this machine cannot listen there."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except (OSError, UnicodeError):  # a name that does not resolve, or cannot be a name ("a..b")
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(socket.SOMAXCONN)
        at = int(sock.getsockname()[1])
    except OSError:
        sock.close()
        return None
    return sock.detach(), at


def join_store(host: str, port: int, world_size: int, timeout_s: float) -> dist.TCPStore:
    """A rank's connection to the store the driver opened for the job; a clear error when it cannot be reached."""
    try:
        return dist.TCPStore(host, port, world_size, is_master=False, timeout=timedelta(seconds=timeout_s))
    except (RuntimeError, OSError) as exc:  # torch's DistNetworkError is a RuntimeError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConnectionError(
            f"this task cannot reach the driver's rendezvous store at {host}:{port} ({first}). Executors must be "
            "able to open connections to the driver (spark.driver.host, and any firewall between them): the job's "
            "progress reports take the same route."
        ) from exc


class StoreGather:
    """``all_gather`` over the job's store: every rank's string, in rank order (what Spark's barrier
    ``allGather`` gives, without its whole-second waits). Each call is one round of keys under ``gather/``; a rank
    waits for the others' keys up to the store's timeout."""

    def __init__(self, store: dist.Store, rank: int, world_size: int) -> None:
        self._store = dist.PrefixStore("gather", store)
        self._rank, self._world_size, self._round = rank, world_size, 0

    def __call__(self, message: str) -> list[str]:
        self._round += 1
        self._store.set(f"{self._round}/{self._rank}", message)
        return [self._store.get(f"{self._round}/{r}").decode() for r in range(self._world_size)]


class Comm:
    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        host: str,
        port: int | None,
        device: torch.device,
        timeout_s: float = 300.0,
        share_port: Callable[[int], int] | None = None,
        store: dist.TCPStore | None = None,
    ) -> None:
        """Join the process group. Every rank brings the ``store`` (the driver's, :func:`join_store`) when no
        ``share_port`` is given. Otherwise rank 0 opens the store: on ``port``, or on a free port when ``port`` is
        None, which ``share_port`` (rank 0's port in, rank 0's port out on every rank) hands to the others; or rank
        0 brings the ``store`` it opened before (:func:`open_store`)."""
        self.rank, self.world_size, self.device = rank, world_size, device
        self.wire_bytes = 0
        """Bytes this rank has put on the wire in collectives so far."""
        timeout = timedelta(seconds=timeout_s)
        if store is not None and share_port is None:
            pass  # every rank holds the job's store already
        elif rank == 0:
            store = store or open_store(host, world_size, timeout_s, port)
            port = store.port
            if share_port is not None:
                share_port(port)
        else:
            if share_port is not None:
                port = share_port(-1)
            if port is None:
                raise ValueError("rank > 0 needs rank 0's port")
            store = dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(self.backend, store=store, rank=rank, world_size=world_size, timeout=timeout)
        self._store = store

    @property
    def store(self) -> dist.Store:
        """The job's rendezvous store, which every rank holds (checkpoints agree through it off the training
        thread: workers/training/torch/snapshots.py)."""
        return self._store

    def _on_device(self, t: torch.Tensor) -> torch.Tensor:
        return t if t.device == self.device else t.to(self.device)

    def _all_gather(self, out: list[torch.Tensor], tensor: torch.Tensor) -> None:
        self.wire_bytes += ring_allgather_bytes(tensor.numel() * tensor.element_size(), self.world_size)
        dist.all_gather(out, tensor)

    def _all_reduce(self, tensor: torch.Tensor, op: Any = None) -> None:
        self.wire_bytes += ring_allreduce_bytes(
            tensor.numel() * tensor.element_size(), tensor.element_size(), self.world_size, self.rank
        )
        dist.all_reduce(tensor, op=op if op is not None else dist.ReduceOp.SUM)

    def all_gather_bytes(self, message: torch.Tensor, *, flag: int = 0) -> tuple[list[torch.Tensor], list[int]]:
        """Every rank's uint8 message and ``flag``, in rank order. gloo's all_gather needs equal sizes: gather the
        lengths (each with its rank's flag), then buffers padded to the longest, then trim. When any rank raised
        a flag the payload exchange is skipped (every rank sees the same flags) and the messages are empty."""
        sizes, flags = self.exchange_lengths(message.numel(), flag)
        if any(flags):
            return [], flags
        return self.all_gather_padded(message, sizes), flags

    def exchange_lengths(self, length: int, flag: int = 0) -> tuple[list[int], list[int]]:
        """Every rank's ``(length, flag)``, in rank order: one all-gather of two int64 per rank."""
        header = torch.tensor([length, flag], dtype=torch.int64, device=self.device)
        headers = [torch.zeros_like(header) for _ in range(self.world_size)]
        self._all_gather(headers, header)
        rows = torch.stack(headers).tolist()
        return [int(r[0]) for r in rows], [int(r[1]) for r in rows]

    def all_gather_padded(self, message: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
        """Every rank's uint8 message, given every rank's length (:meth:`exchange_lengths`), padded to the longest."""
        longest = max(sizes)
        padded = torch.zeros(longest, dtype=torch.uint8, device=self.device)
        padded[: message.numel()] = self._on_device(message)
        out = [torch.empty(longest, dtype=torch.uint8, device=self.device) for _ in range(self.world_size)]
        self._all_gather(out, padded)
        return [buf[:size] for buf, size in zip(out, sizes, strict=True)]

    def any_flags(self, *flags: bool) -> list[bool]:
        """For each flag: is it set on any rank? (stop requests, a NaN loss)."""
        t = torch.tensor([int(f) for f in flags], dtype=torch.int32, device=self.device)
        self._all_reduce(t, dist.ReduceOp.MAX)
        return [bool(v) for v in t.tolist()]

    def min_int(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.int64, device=self.device)
        self._all_reduce(t, dist.ReduceOp.MIN)
        return int(t.item())

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """All-reduce (sum) in place; CPU tensors take a round trip through the device under NCCL."""
        if tensor.device == self.device:
            self._all_reduce(tensor)
            return tensor
        on_device = tensor.to(self.device)
        self._all_reduce(on_device)
        tensor.copy_(on_device)
        return tensor

    def mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        self.sum_(tensor)
        return tensor.div_(self.world_size)

    def gather_floats(self, values: list[float]) -> list[list[float]]:
        """Every rank's list of floats (same length everywhere), in rank order."""
        t = torch.tensor(values, dtype=torch.float64, device=self.device)
        out = [torch.zeros_like(t) for _ in range(self.world_size)]
        self._all_gather(out, t)
        return [o.tolist() for o in out]

    def barrier(self) -> None:
        # all_reduce instead of dist.barrier(): NCCL's barrier guesses a device and warns
        self.any_flags(False)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
