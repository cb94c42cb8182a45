"""Saving a download: where it goes (a file, or a folder and the name the service gives) and writing it whole."""

from __future__ import annotations

import contextlib
from email.message import Message
from pathlib import Path

import httpx

from sparktrain.errors import LocalFileError


def attachment_name(response: httpx.Response) -> str | None:
    """The file name a response's ``Content-Disposition`` gives, without any folder part."""
    header = response.headers.get("content-disposition")
    if not header:
        return None
    message = Message()
    message["content-disposition"] = header
    name = Path(message.get_filename() or "").name
    return name if name not in ("", ".", "..") else None


def check_folder(folder: Path) -> None:
    """A file's folder, which ``download`` does not create (a typo in a path makes no folders)."""
    if folder.is_dir():
        return
    if folder.exists():
        raise LocalFileError(f"cannot write into {folder}: a file has that name, not a folder")
    raise LocalFileError(f"the folder {folder} does not exist (a PATH ending in / is a folder, made when missing)")


def make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError as exc:
        raise LocalFileError(f"cannot create the folder {folder}: a file has that name") from exc
    except OSError as exc:
        raise LocalFileError(f"cannot create the folder {folder}: {exc.strerror or exc}") from exc


def save(response: httpx.Response, target: Path) -> None:
    """Write the body next to ``target`` and move it there once complete (no half file under the name)."""
    partial = target.with_name(target.name + ".part")
    try:
        with partial.open("wb") as out:
            for chunk in response.iter_bytes():
                out.write(chunk)
        partial.replace(target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise LocalFileError(f"cannot write {target}: {exc.strerror or exc}") from exc
        raise
