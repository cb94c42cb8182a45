"""SPARKTRAIN_API_KEYS: the format is checked at start-up, keys never show in a repr or an error, and a key is
identified by comparing digests of every configured key."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.core.auth import ANONYMOUS, ApiKey, Caller, KeyRing, parse_api_keys
from app.core.errors import Unauthorized
from app.core.settings import Settings, load_settings

ALICE = "alice-0123456789abcdef"
ROOT = "root-0123456789abcdef0"


def test_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKTRAIN_API_KEYS", f" {ALICE}:alice , {ROOT}:root:admin ,")
    settings = load_settings()
    assert settings.api_keys == [ApiKey(ALICE, "alice"), ApiKey(ROOT, "root", admin=True)]
    assert ALICE not in repr(settings) and ALICE not in repr(settings.api_keys)
    assert load_settings(api_keys="").api_keys == []


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (ALICE, "entry 1 has 0 ':' separators"),
        (f"{ALICE}:alice:admin:x", "entry 1 has 3 ':' separators"),
        (f"{ALICE}:alice:root", "the third part may only be 'admin'"),
        (f"{ALICE}:", "entry 1: the owner (its second part) must be"),
        (f"{ALICE}:al ice", "the owner (its second part) must be"),
        (f"{ALICE}:{'o' * 201}", "must be 1 to 200"),
        # written owner:key, with a key an owner cannot be (token_urlsafe's may start with '-', base64's hold '/')
        (f"data-science-team:-{ALICE}", "the entry is key:owner, the key first"),
        (f"data-science-team:{ALICE}+/==", "the entry is key:owner, the key first"),
        (f"data-science-team:alice:{ALICE}", "the third part may only be 'admin' (it is something else)"),
        (f"{ROOT}:root,short:bob", "entry 2: the key has 5 characters; use at least 16"),
        (":alice", "the key is empty"),
        ("alice key with spaces:alice", "holds spaces"),
        (f"{ALICE}:alice,{ALICE}:bob", "entry 2 repeats an earlier key"),
    ],
)
def test_bad_entries_fail_at_start_with_what_to_fix(value: str, words: str) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(api_keys=value)
    text = str(info.value)
    assert "api_keys" in text and words in text, text
    assert ALICE not in text and ROOT not in text and "short" not in text  # the key itself is never repeated


def test_identify() -> None:
    ring = KeyRing(parse_api_keys([f"{ALICE}:alice", f"{ROOT}:root:admin"]))
    assert ring.enabled
    assert ring.identify(f"Bearer {ALICE}") == Caller("alice", admin=False)
    assert ring.identify(f"bearer   {ROOT}  ") == Caller("root", admin=True)
    for header, error in [
        (None, None),
        ("  ", None),
        (f"Basic {ALICE}", "invalid_request"),
        (f"Bearer {ALICE} {ROOT}", "invalid_request"),
        ("Bearer", "invalid_request"),
        (f"Bearer {ALICE.upper()}", "invalid_token"),
        (f"Bearer {ALICE}\u00e9", "invalid_token"),
    ]:
        with pytest.raises(Unauthorized) as info:
            ring.identify(header)
        challenge = info.value.headers["WWW-Authenticate"]
        assert challenge.startswith("Bearer realm=")
        assert (f'error="{error}"' in challenge) if error else "error=" not in challenge
        assert info.value.status == 401 and "Bearer" in info.value.detail


def test_without_keys_everyone_is_the_anonymous_admin() -> None:
    ring = KeyRing([])
    assert not ring.enabled
    assert ring.identify(None) is ANONYMOUS and ring.identify("Bearer whatever") is ANONYMOUS
    assert ANONYMOUS.admin and ANONYMOUS.scope is None and ANONYMOUS.sees("anyone")


def test_what_a_caller_sees() -> None:
    alice = Caller("alice", admin=False)
    assert alice.scope == "alice" and alice.sees("alice") and not alice.sees("bob") and not alice.sees(None)
    assert Caller("root", admin=True).sees("bob")
