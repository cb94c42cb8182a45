"""The threshold codec's loops in C (``threshold_native.c``), built on first use with the machine's C compiler.

numpy needs about ten passes and temporaries for what one loop does: compare, collect the indices, subtract τ
and write the varints (``bench.codec`` profiled where the time goes); a bitmap's steps, residual and bits take
two. The C file is compiled once per machine and source into a cache directory (``SPARKTRAIN_NATIVE_CACHE``, else
``~/.cache/sparktrain``), under a name that is the hash of the source, written to a private name and renamed into
place, so ranks that start together never load half a file. Without a compiler, or with
``SPARKTRAIN_NATIVE_CODEC=0``, :func:`library` is None and the codec runs its numpy code: the same messages and
residuals bit for bit (tests compare the two), only slower.

Executor-side: stdlib only.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import pkgutil
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("threshold_native.c")
BLOCK = 64
"""Room past ``cap`` that ``st_scan`` may write indices into (it checks ``cap`` every 16 elements)."""
FLAGS = ("-O3", "-std=c99", "-shared", "-fPIC")
"""No -march=native (a cached build may be shared by machines of another CPU) and no -ffast-math (results must
be those of numpy's float32 arithmetic)."""


@dataclass
class _State:
    lib: ctypes.CDLL | None = None
    tried: bool = False
    failure: str | None = None
    """Why the C codec is not in use, when it is not."""
    lock: threading.Lock = field(default_factory=threading.Lock)


_state = _State()


def library() -> ctypes.CDLL | None:
    """The compiled codec, built on the first call; None when it cannot be built or is switched off."""
    if _state.tried:
        return _state.lib
    with _state.lock:
        if not _state.tried:
            try:
                _state.lib = _load()
            except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
                _state.failure = f"{type(exc).__name__}: {exc}"
                log.warning("the C threshold codec is not in use (%s); numpy does the work", _state.failure)
            _state.tried = True
    return _state.lib


def engine() -> str:
    """What encodes and decodes sparse messages on the CPU here: ``c``, or ``numpy (why)``."""
    return "c" if library() is not None else f"numpy ({failure()})"


def failure() -> str | None:
    """Why :func:`library` is None (after it was called), else None."""
    return _state.failure


def _load() -> ctypes.CDLL | None:
    if os.environ.get("SPARKTRAIN_NATIVE_CODEC", "1") == "0":
        _state.failure = "switched off (SPARKTRAIN_NATIVE_CODEC=0)"
        return None
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc, gcc or $CC) on this machine")
    # read as package data: executors import this package from the zip the driver ships (app/spark/session.py)
    source = pkgutil.get_data(__name__.rpartition(".")[0], SOURCE.name)
    if source is None:
        raise RuntimeError(f"{SOURCE.name} is not next to {__name__}")
    digest = hashlib.sha256(source + " ".join(FLAGS).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("SPARKTRAIN_NATIVE_CACHE") or Path.home() / ".cache" / "sparktrain")
    built = cache / f"threshold-{digest}.so"
    if not built.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".threshold-", dir=cache) as work:
            c_file, tmp = Path(work, SOURCE.name), Path(work, built.name)
            c_file.write_bytes(source)
            try:
                subprocess.run([compiler, *FLAGS, str(c_file), "-o", str(tmp), "-lm"], check=True,
                               capture_output=True, timeout=120)  # fmt: skip
            except subprocess.CalledProcessError as exc:
                raise RuntimeError(f"{compiler} failed: {exc.stderr.decode(errors='replace')[-500:]}") from None
            os.chmod(tmp, 0o755)  # readable by other users (an image's runtime user loads what root built)
            os.replace(tmp, built)
    lib = ctypes.CDLL(str(built))
    i64, f32, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    lib.st_scan.argtypes, lib.st_scan.restype = [ptr, i64, f32, ptr, i64], i64
    lib.st_take.argtypes, lib.st_take.restype = [ptr, ptr, i64, f32, ctypes.c_int, ptr, ptr], i64
    lib.st_check.argtypes, lib.st_check.restype = [ptr, i64, i64, i64], ctypes.c_int
    lib.st_add_compact.argtypes, lib.st_add_compact.restype = [ptr, ptr, i64, f32], None
    lib.st_add_local.argtypes, lib.st_add_local.restype = [ptr, ptr, ptr, i64, f32], None
    lib.st_bitmap.argtypes, lib.st_bitmap.restype = [ptr, i64, f32, ptr, ptr], i64
    lib.st_add_steps.argtypes, lib.st_add_steps.restype = [ptr, ptr, i64, f32, ctypes.c_int], None
    lib.st_add_bitmap.argtypes, lib.st_add_bitmap.restype = [ptr, i64, ptr, f32, ctypes.c_int], None
    lib.st_add_bitmaps.argtypes, lib.st_add_bitmaps.restype = [ptr, i64, i64, ptr, ptr, ptr, ptr, ctypes.c_int], None
    return lib
