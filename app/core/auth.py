"""API keys (``SPARKTRAIN_API_KEYS``) and the caller they identify.

The setting is empty (no authentication: every caller is the anonymous admin) or a comma-separated list of
``key:owner`` / ``key:owner:admin`` (API.md). A request sends ``Authorization: Bearer <key>``. Keys are compared
as SHA-256 digests with :func:`hmac.compare_digest`, against every configured key, so the time an answer takes
says nothing about how much of a key was right.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.errors import Unauthorized

OWNER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,199}$"  # jobs.owner, models.owner, datasets.owner: 200 characters
MIN_KEY_LENGTH = 16
_OWNER = re.compile(OWNER_PATTERN)
_KEY = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII without spaces: it travels in an HTTP header
_GENERATE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


@dataclass(frozen=True)
class Caller:
    """Who is asking. Without configured API keys every caller is the anonymous admin."""

    owner: str = "anonymous"
    admin: bool = True

    def sees(self, owner: str | None) -> bool:
        """Whether this caller may read and change an object that belongs to ``owner``."""
        return self.admin or owner == self.owner

    @property
    def scope(self) -> str | None:
        """The owner to filter lists and lookups by; None (everything) for an admin."""
        return None if self.admin else self.owner


ANONYMOUS = Caller()


@dataclass(frozen=True)
class ApiKey:
    """One configured key. The key itself never appears in a repr (and so in no log line or traceback)."""

    key: str = field(repr=False)
    owner: str
    admin: bool = False


def valid_owner(name: str) -> bool:
    """Whether ``name`` can be an owner's (all of it: ``re.match`` with ``$`` let ``bob\n`` through)."""
    return _OWNER.fullmatch(name) is not None


def parse_api_keys(entries: Iterable[Any]) -> list[ApiKey]:
    """``key:owner`` / ``key:owner:admin`` entries (or ApiKey objects) as ApiKeys. A ValueError names the entry by
    its position and says what to fix; it never repeats a key."""
    keys: list[ApiKey] = []
    for position, entry in enumerate(entries, start=1):
        if isinstance(entry, ApiKey):
            keys.append(entry)
            continue
        where = f"SPARKTRAIN_API_KEYS entry {position}"
        if not isinstance(entry, str):
            raise ValueError(f"{where}: expected text of the form key:owner or key:owner:admin")
        parts = entry.strip().split(":")
        if len(parts) not in (2, 3):
            raise ValueError(
                f"{where} has {len(parts) - 1} ':' separators; write key:owner or key:owner:admin "
                "(keys and owners contain no ':' or ',')"
            )
        key, owner = parts[0], parts[1]
        if not _KEY.match(key):
            raise ValueError(f"{where}: the key is empty or holds spaces or non-ASCII characters")
        if len(key) < MIN_KEY_LENGTH:
            raise ValueError(
                f"{where}: the key has {len(key)} characters; use at least {MIN_KEY_LENGTH} random ones "
                f"(e.g. {_GENERATE})"
            )
        if not valid_owner(owner):  # not shown: an entry written owner:key has the key here
            raise ValueError(
                f"{where}: the owner (its second part) must be 1 to 200 letters, digits, '.', '_', '@' or '-', "
                "starting with a letter or digit; the entry is key:owner, the key first"
            )
        if len(parts) == 3 and parts[2] != "admin":  # not shown either: it may be a second key
            raise ValueError(f"{where}: the third part may only be 'admin' (it is something else)")
        keys.append(ApiKey(key=key, owner=owner, admin=len(parts) == 3))
    seen: set[str] = set()
    for position, api_key in enumerate(keys, start=1):
        if api_key.key in seen:
            raise ValueError(f"SPARKTRAIN_API_KEYS entry {position} repeats an earlier key; every key must be unique")
        seen.add(api_key.key)
    return keys


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


class KeyRing:
    """The configured keys, ready to identify callers. ``enabled`` is False when none are configured."""

    def __init__(self, keys: Sequence[ApiKey]) -> None:
        self._entries = [(_digest(k.key), Caller(owner=k.owner, admin=k.admin)) for k in keys]

    @property
    def enabled(self) -> bool:
        return bool(self._entries)

    def identify(self, authorization: str | None) -> Caller:
        """The caller an ``Authorization`` header names; raises Unauthorized (401) when it names none."""
        if not self._entries:
            return ANONYMOUS
        if authorization is None or not authorization.strip():
            raise Unauthorized(
                "This endpoint needs an API key: send the header 'Authorization: Bearer <key>'.",
                headers={"WWW-Authenticate": 'Bearer realm="sparktrain"'},
            )
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or " " in token:
            raise Unauthorized(
                "The Authorization header is malformed: send 'Authorization: Bearer <key>' (one key, no other scheme).",
                headers={"WWW-Authenticate": 'Bearer realm="sparktrain", error="invalid_request"'},
            )
        given = _digest(token)
        found: Caller | None = None
        for digest, caller in self._entries:  # no early exit: every key is compared
            if hmac.compare_digest(given, digest):
                found = caller
        if found is None:
            raise Unauthorized(
                "The API key is not valid: send one of the keys the service was started with (SPARKTRAIN_API_KEYS) "
                "as 'Authorization: Bearer <key>'.",
                headers={"WWW-Authenticate": 'Bearer realm="sparktrain", error="invalid_token"'},
            )
        return found
