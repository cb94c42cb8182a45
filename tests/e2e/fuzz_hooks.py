"""schemathesis hooks of tests/e2e/test_fuzz.py, loaded by the schemathesis CLI (not a test module).

``problem_json_errors`` is a check: every 4xx and 5xx is RFC 9457 problem+json with its four members.
``after_call`` cancels each job a fuzzed request queued, so that the run leaves the consumer idle.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import requests
import schemathesis

PROBLEM_JSON = "application/problem+json"
PROBLEM_MEMBERS = ("type", "title", "status", "detail")


@schemathesis.check
def problem_json_errors(ctx: Any, response: schemathesis.Response, case: schemathesis.Case) -> None:
    status = response.status_code
    if status < 400:
        return
    media = (response.headers.get("content-type") or [""])[0].split(";")[0].strip().lower()
    if media != PROBLEM_JSON:
        raise AssertionError(f"A {status} answer is {media or 'without a Content-Type'}, not {PROBLEM_JSON}")
    body = response.json()
    if not isinstance(body, dict):
        raise AssertionError(f"A {status} problem is not a JSON object: {body!r}")
    missing = [m for m in PROBLEM_MEMBERS if not isinstance(body.get(m), int if m == "status" else str)]
    if missing:
        raise AssertionError(f"A {status} problem lacks {missing}: {body}")
    if body["status"] != status:
        raise AssertionError(f"A {status} problem says status {body['status']}")


@schemathesis.hook
def after_call(context: Any, case: schemathesis.Case, response: schemathesis.Response) -> None:
    if response.status_code != 202:
        return
    job_id = response.json().get("id")
    if isinstance(job_id, str):
        url = urlsplit(str(response.request.url))
        requests.post(f"{url.scheme}://{url.netloc}/jobs/{job_id}/cancel", timeout=30)
