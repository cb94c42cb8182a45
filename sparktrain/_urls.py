"""The service's URL: what makes one unusable (found before any request: a typo is a usage error that says what is
wrong, not a traceback or "connection refused"), and what to try when one does not answer."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

EXAMPLE = "http://127.0.0.1:8000"
_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*)://", re.IGNORECASE)  # a URL's scheme, as RFC 3986 spells one
_PLAIN_HTTP = ("WRONG_VERSION_NUMBER", "record layer failure", "http request")
"""How OpenSSL (1.1, 3.x) says that a TLS handshake got a plain HTTP answer."""


def url_problem(url: str) -> str | None:
    """What makes ``url`` unusable as the service's address, as the end of a sentence about it; None: nothing.
    Spaces around it are not part of it (a .env file's trailing space; httpx drops them too): one inside it is."""
    url = url.strip()
    if not url:
        return f"is empty (e.g. {EXAMPLE})"
    if any(c.isspace() for c in url):
        return f"has a space in it (e.g. {EXAMPLE})"
    scheme = _SCHEME.match(url)
    if scheme is None:
        if url.lower().startswith(("http:", "https:")):
            return f"is not a URL: write it as http://HOST:PORT (e.g. {EXAMPLE})"
        fixed = f"http://{url}"
        if _address_problem(fixed) is None:
            return f"needs http:// or https:// (e.g. {fixed})"
        return f"needs http:// or https:// (e.g. {EXAMPLE})"
    if scheme[1].lower() not in ("http", "https"):
        return f"starts with {scheme[1]}://: only http:// and https:// URLs are accepted"
    return _address_problem(url)


def _address_problem(url: str) -> str | None:
    """The host and port of a URL with a scheme."""
    try:
        parts = urlsplit(url)
    except ValueError:  # a "[" never closed, or brackets around something that is not an IPv6 address
        return "is not a URL: an IPv6 host is written in brackets, e.g. http://[::1]:8000"
    if not parts.hostname:
        return f"has no host (e.g. {EXAMPLE})"
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        given = parts.netloc.rpartition(":")[2]
        return f"has the port {given!r}, which is not a number from 1 to 65535 (e.g. {EXAMPLE})"
    return None


def masked(url: str) -> str:
    """The URL with the password in it, if any, as ``***`` (``http://bob:***@host:8029``): messages print the URL,
    never a secret. As urlsplit reads one: the user ends at the first ``:``, the password at the last ``@``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    userinfo, at, host = rest[:end].rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.partition(':')[0]}:***@{host}{rest[end:]}"


def no_answer(url: str, error: str, url_from: str) -> str:
    """The message of a request that got no answer: why, what to check, and where the URL comes from (the URL's
    password masked)."""
    url = masked(url)
    if url.lower().startswith("https://") and any(words in error for words in _PLAIN_HTTP):
        check = f"The service may speak plain HTTP: try http://{url[len('https://') :]}."
    else:
        check = "Is the service running there?"
    source = "is the default" if url_from == "the default URL" else f"comes from {url_from}"
    return (
        f"no answer from {url}: {error}. {check} The URL {source}; give another with --url URL (before the "
        "command) or SPARKTRAIN_URL."
    )
