"""The CLI given bad input (a walkthrough of typos and broken files): each is a one-line usage error, exit 2, found
before any request, so nothing here needs a service (the URL is one where nothing listens)."""

from __future__ import annotations

import http.server
import subprocess
import threading
from pathlib import Path

import pytest

from sparktrain._csv import at_lines, cell, read_records, read_rows
from tests.sparktrain.test_cli import REPO
from tests.sparktrain.test_cli import cli as run_cli

NOBODY = "http://127.0.0.1:9"  # nothing listens there: a request would be exit 4, unreachable


def cli(*args: str, url: str = NOBODY) -> subprocess.CompletedProcess[str]:
    return run_cli(None, *args, url=url)


def _one_line_usage_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    return done.stderr


def _open_quote_on_line_20(path: Path) -> Path:
    """300 lines: the header, then rows; line 20 opens a quoted field that is never closed."""
    lines = ["trip_id,note"] + [f"{n},fine" for n in range(2, 301)]
    lines[19] = '20,"never closed'
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_download_into_a_folder_that_is_not_there_is_refused_and_makes_nothing(tmp_path: Path) -> None:
    """It made every folder of the path and exited 0 (with a service), though only a PATH ending in / is made."""
    target = tmp_path / "nodir" / "sub" / "x.tar.gz"
    stderr = _one_line_usage_error(cli("download", "m:1", "-o", str(target)))
    assert f"the folder {target.parent} does not exist" in stderr and "ending in /" in stderr, stderr
    assert not (tmp_path / "nodir").exists()
    (tmp_path / "a-file").write_text("")
    stderr = _one_line_usage_error(cli("download", "m:1", "-o", str(tmp_path / "a-file" / "x.tar.gz")))
    assert "a-file: a file has that name, not a folder" in stderr, stderr


def test_an_open_quote_names_its_line_and_nothing_is_sent(tmp_path: Path) -> None:
    """The quote on line 20 took in the other 280 lines as one cell: "20 rows" were counted and sent (audit)."""
    path = _open_quote_on_line_20(tmp_path / "bad.csv")
    with pytest.raises(ValueError, match=r"bad\.csv: line 20: a quoted field opens there and is never closed"):
        read_rows(path)
    stderr = _one_line_usage_error(cli("predict", "m", "--csv", str(path), "--max-inline", "0", "--key", "trip_id"))
    assert "line 20: a quoted field opens there and is never closed" in stderr and "batch job" not in stderr, stderr


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('a,b\n1,"x\ny"\n3,"open\n4,5\n', 4),  # after a quoted field of two lines that is closed
        ('a,b\r\n1,2\r\n3,"open', 3),  # Windows line ends, no line end at the end
        ('a,"b\n1,2\n', 1),  # the header
        ('a,b\n1,2\n"', 3),  # the very last character
    ],
)
def test_the_line_of_an_open_quote_is_the_line_it_opens_on(tmp_path: Path, text: str, line: int) -> None:
    (tmp_path / "rows.csv").write_bytes(text.encode())
    with pytest.raises(ValueError, match=f"line {line}: a quoted field opens there"):
        read_rows(tmp_path / "rows.csv")


def test_closed_quotes_across_lines_and_blank_lines_still_read(tmp_path: Path) -> None:
    (tmp_path / "rows.csv").write_text('\na,b\n1,"x\ny"\n\n"3",4')
    assert read_rows(tmp_path / "rows.csv") == (["a", "b"], [["1", "x\ny"], ["3", "4"]])


def test_a_negative_max_inline_is_a_usage_error(tmp_path: Path) -> None:
    """-5 was taken: every file went to a batch job (here: a request, so exit 4)."""
    (tmp_path / "rows.csv").write_text("trip_id,x\n1,2\n")
    done = cli("predict", "m", "--csv", str(tmp_path / "rows.csv"), "--max-inline", "-5", "--key", "trip_id")
    assert done.returncode == 2 and "Invalid value for '--max-inline'" in done.stderr, done.stderr


@pytest.mark.parametrize("command", ["logs", "show", "cancel"])
def test_a_job_id_prefix_under_6_characters_says_how_much_to_give(command: str) -> None:
    """`logs -f 5b35` asked the service, which said "No job with id '5b35'" (or was unreachable)."""
    args = ("logs", "-f", "5B35") if command == "logs" else (command, "5b35")
    stderr = _one_line_usage_error(cli(*args))
    assert "give at least 6 characters of the id, or the whole id" in stderr, stderr


def test_a_url_of_another_scheme_is_refused_without_a_suggestion() -> None:
    """`--url ftp://x` suggested "http://ftp://x"."""
    stderr = _one_line_usage_error(cli("--url", "ftp://x", "jobs"))
    assert "only http:// and https:// URLs are accepted" in stderr and "http://ftp" not in stderr, stderr
    schemeless = _one_line_usage_error(cli("jobs", url="127.0.0.1:9"))  # no scheme at all: the suggestion stays
    assert "needs http:// or https:// (e.g. http://127.0.0.1:9)" in schemeless, schemeless


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:abc", "has the port 'abc', which is not a number from 1 to 65535"),
        ("http://127.0.0.1:99999", "has the port '99999', which is not a number from 1 to 65535"),
        ("http://[::1", "is not a URL: an IPv6 host is written in brackets, e.g. http://[::1]:8000"),
        ("http://", "has no host (e.g. http://127.0.0.1:8000)"),
        ("http:127.0.0.1", "is not a URL: write it as http://HOST:PORT"),
    ],
)
def test_a_malformed_url_is_one_line_and_exit_2(url: str, says: str) -> None:
    """Each was a traceback (httpx.InvalidURL), "e.g. http://http:", or "connection refused" (exit 4)."""
    stderr = _one_line_usage_error(cli("--url", url, "jobs"))
    assert f"the service's URL {url!r} (from --url) {says}" in stderr, stderr


def test_an_unreachable_service_says_where_the_url_comes_from_and_https_to_plain_http_says_so() -> None:
    down = cli("jobs")
    assert down.returncode == 4 and len(down.stderr.strip().splitlines()) == 1, down.stderr
    assert "Connection refused. Is the service running there? The URL comes from SPARKTRAIN_URL" in down.stderr
    assert "give another with --url URL (before the command) or SPARKTRAIN_URL" in down.stderr, down.stderr
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        tls = cli("--url", f"https://127.0.0.1:{port}", "jobs")
    finally:
        server.shutdown()
        server.server_close()
    assert tls.returncode == 4 and f"may speak plain HTTP: try http://127.0.0.1:{port}." in tls.stderr, tls.stderr
    assert "The URL comes from --url" in tls.stderr and "Is the service running" not in tls.stderr, tls.stderr


def test_a_global_option_after_the_command_is_shown_with_its_value_before_that_command() -> None:
    """It printed `(sparktrain --url jobs ...)`, which takes jobs as the URL."""
    late = cli("show", "abcdef", "--url", "http://x")
    assert late.returncode == 2 and "(sparktrain --url URL show ...)" in late.stderr, late.stderr
    assert "(sparktrain --json logs ...)" in cli("logs", "abcdef", "--json").stderr


def test_download_to_dash_is_refused_and_writes_no_file_named_dash() -> None:
    stderr = _one_line_usage_error(cli("download", "m:1", "-o", "-"))
    assert "the archive is not written to stdout" in stderr and not (REPO / "-").exists(), stderr


def test_non_finite_numbers_stay_text_and_rows_keep_their_lines(tmp_path: Path) -> None:
    """NaN and inf became floats that JSON cannot carry (a traceback); the service's dataframe_split.data[i] is the
    file's line of row i (the header and blank lines counted)."""
    assert [cell(t) for t in ("NaN", "Nan", "inf", "-Infinity", "1e999", "1", "-2.5")] == [
        "NaN", "Nan", "inf", "-Infinity", "1e999", 1, -2.5
    ]  # fmt: skip
    (tmp_path / "rows.csv").write_text('\na,b\n1,"x\ny"\n\n"3",4\n')
    assert read_records(tmp_path / "rows.csv") == (["a", "b"], [["1", "x\ny"], ["3", "4"]], [3, 6])
    problem = {"detail": "dataframe_split.data[1]: no", "errors": [{"loc": "dataframe_split.data[1]", "msg": "no"}]}
    assert at_lines(problem, "rows.csv", [3, 6]) == {
        "detail": "rows.csv line 6: no", "errors": [{"loc": "rows.csv line 6", "msg": "no"}]
    }  # fmt: skip
