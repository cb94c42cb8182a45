"""The documentation holds together: every relative link in README.md, CHANGELOG.md, bench/README.md,
docker/README.md and docs/ resolves inside the repository (files and ``#anchors``), the README stays a front door,
and no page points at documents outside the repository. The examples of the pages a newcomer follows first run as
written: one ``post`` helper, request bodies that are valid requests, files that ship, shell that parses, and Python
that defines what it uses."""

from __future__ import annotations

import ast
import builtins
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pytest

REPO = Path(__file__).resolve().parents[1]
README_MAX_BYTES = 12 * 1024
FORBIDDEN = ("../shared", "shared/DESIGN.md")
SKIPPED_DIRS = {"var", "node_modules", "build", "dist", "spark-warehouse", "__pycache__"}
"""Besides hidden directories (.git, .venv, .bench, caches): state and build output, not documentation."""

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_INLINE_CODE = re.compile(r"(`+).+?\1")
# [text](target) or [text](target "title"); the text may hold one level of brackets, e.g. [`a[0]`](x).
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+\"[^\"]*\")?\s*\)")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)


def linking_files() -> list[Path]:
    files = [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "bench" / "README.md", REPO / "docker" / "README.md"]
    files += sorted((REPO / "docs").rglob("*.md"))
    return files


def all_markdown() -> list[Path]:
    found = []
    for directory, subdirs, files in os.walk(REPO):
        subdirs[:] = [d for d in subdirs if not d.startswith(".") and d not in SKIPPED_DIRS]
        found += [Path(directory) / f for f in files if f.endswith(".md")]
    return sorted(found)


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fence = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        match = _FENCE.match(line)
        if match:
            marker = match.group(1)
            if fence is None:
                fence = marker[0] * len(marker)
            elif marker.startswith(fence):
                fence = None
            continue
        if fence is None:
            out.append((number, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text (links and code marks removed), lowercase, punctuation other than
    '-' and '_' dropped, spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = text.strip().lower()
    text = "".join(ch for ch in text if ch.isalnum() or ch in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a markdown file offers: its headings' slugs (repeats get -1, -2, ... as on GitHub) and
    explicit <a name=...> / <a id=...> tags."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in _prose_lines(path.read_text(encoding="utf-8")):
        found.update(_HTML_ANCHOR.findall(line))
        match = _HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every markdown link outside code blocks and inline code."""
    out = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for match in _LINK.finditer(_INLINE_CODE.sub("", line)):
            out.append((number, match.group(1).strip("<>")))
    return out


def broken_links(path: Path, root: Path = REPO) -> list[str]:
    """One line per link of ``path`` that does not resolve inside ``root``."""
    problems = []
    where = path.relative_to(root)
    for number, target in links(path):
        if re.match(r"^(https?:|mailto:)", target, re.IGNORECASE):
            continue
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            problems.append(f"{where}:{number}: {target}: only http(s), mailto and relative links are allowed")
            continue
        file_part, _, anchor = target.partition("#")
        if file_part.startswith("/"):
            problems.append(f"{where}:{number}: {target}: absolute path; link relative to the file")
            continue
        resolved = (path.parent / unquote(file_part)).resolve() if file_part else path
        if not resolved.is_relative_to(root):
            problems.append(f"{where}:{number}: {target}: leaves the repository")
            continue
        if not resolved.exists():
            problems.append(f"{where}:{number}: {target}: {resolved.relative_to(root)} does not exist")
            continue
        if anchor and resolved.is_file() and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(
                f"{where}:{number}: {target}: no heading with anchor #{anchor} in {resolved.relative_to(root)}"
            )
    return problems


def test_linking_files_exist() -> None:
    missing = [str(p.relative_to(REPO)) for p in linking_files()[:3] if not p.is_file()]
    assert not missing, f"missing documentation files: {missing}"
    assert list((REPO / "docs").glob("*.md")), "docs/ holds no pages"


def test_every_relative_link_resolves() -> None:
    problems = [problem for path in linking_files() if path.is_file() for problem in broken_links(path)]
    assert not problems, f"{len(problems)} broken link(s):\n" + "\n".join(problems)


def test_readme_is_a_front_door() -> None:
    size = (REPO / "README.md").stat().st_size
    assert size <= README_MAX_BYTES, f"README.md is {size} bytes; at most {README_MAX_BYTES} (move detail to docs/)"


def test_no_page_points_outside_the_repository() -> None:
    offending = [
        f"{path.relative_to(REPO)}:{number}: {word!r}"
        for path in all_markdown()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        for word in FORBIDDEN
        if word in line
    ]
    assert not offending, "documents outside the repository are mentioned:\n" + "\n".join(offending)


@pytest.mark.parametrize(
    ("heading", "expected"),
    [
        ("What happens when a driver or an executor dies", "what-happens-when-a-driver-or-an-executor-dies"),
        ("`bench.xgboost`: service vs plain xgboost", "benchxgboost-service-vs-plain-xgboost"),
        ("Pins (and why)", "pins-and-why"),
        ("snake_case and kebab-case", "snake_case-and-kebab-case"),
        ("[Linked](other.md) heading", "linked-heading"),
    ],
)
def test_slug_follows_github(heading: str, expected: str) -> None:
    assert slug(heading) == expected


def test_the_checker_finds_broken_links(tmp_path: Path) -> None:
    root = tmp_path.resolve() / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "other.md").write_text("# Other page\n\n## Other page\n", encoding="utf-8")
    page = root / "docs" / "page.md"
    page.write_text(
        "# Title\n\n[ok](#title) [bad](#nope) [gone](missing.md) [out](../../x.md) `[code](skipped.md)`\n"
        "[there](other.md#other-page) [repeat](other.md#other-page-1) [not there](other.md#title)\n"
        "```\n[fenced](also-skipped.md)\n```\n[web](https://example.com) [dir](.)\n",
        encoding="utf-8",
    )
    problems = broken_links(page, root)
    assert len(problems) == 4, problems
    assert any("#nope" in p for p in problems)
    assert any("missing.md" in p for p in problems)
    assert any("leaves the repository" in p for p in problems)
    assert any("other.md#title" in p for p in problems)


# --- the examples in the pages a newcomer follows first run as written ------------------------------------------

WALKED = ("README.md", "docs/examples.md", "docs/cli.md", "docs/inference.md", "docs/tuning.md", "docs/testing.md")
"""The pages whose commands a newcomer pastes: their shell and Python examples are checked below."""
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(path: Path, language: str) -> list[str]:
    """The fenced code blocks of ``language`` in ``path`` (list items' indented blocks too, dedented)."""
    text = re.sub(r"^ {2,4}(```)", r"\1", path.read_text(encoding="utf-8"), flags=re.MULTILINE)
    found = []
    for lang, body in _BLOCK.findall(text):
        if lang == language:
            lines = body.splitlines()
            indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
            found.append("\n".join(line[indent:] for line in lines) + "\n")
    return found


def shell_tokens(block: str) -> list[str]:
    """``block`` as the shell splits it into words: quotes joined across lines, comments dropped, and ``|``, ``;``,
    ``(`` and ``)`` words of their own."""
    lexer = shlex.shlex(block.replace("\\\n", " "), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def _helpers(path: Path) -> list[str]:
    return [line for block in blocks(path, "bash") for line in block.splitlines() if line.startswith("post() {")]


def test_the_post_helper_is_the_same_wherever_it_is_defined() -> None:
    """README.md's ``post`` took ``@file`` or inline JSON, examples.md's a file name: after examples.md, the README's
    inline ``post /predict '{...}'`` sent an empty body (curl's warning hidden by ``-s``)."""
    defined = {name: _helpers(REPO / name) for name in ("README.md", "docs/examples.md")}
    assert all(len(lines) == 1 for lines in defined.values()), defined
    assert defined["README.md"] == defined["docs/examples.md"], defined


class _Recorder(BaseHTTPRequestHandler):
    seen: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        self.seen.append((self.path, self.headers.get("content-type", ""), body))
        self.send_response(202)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"id": "abc"}')

    def log_message(self, *args: object) -> None:
        return None


@pytest.mark.skipif(shutil.which("curl") is None or shutil.which("bash") is None, reason="needs bash and curl")
def test_the_post_helper_sends_a_file_and_inline_json_and_ends_its_line(tmp_path: Path) -> None:
    (tmp_path / "body.json").write_text('{"from": "a file"}\n')
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Recorder.seen = []
    try:
        helper = _helpers(REPO / "README.md")[0].replace("localhost:8000", f"127.0.0.1:{server.server_port}")
        script = f"{helper}\npost /train @body.json\npost /predict '{{\"inline\": [1,\n 2]}}'\n"
        run = subprocess.run(
            ["bash", "-c", script], check=False, cwd=tmp_path, capture_output=True, text=True, timeout=30
        )
    finally:
        server.shutdown()
    assert run.returncode == 0, run.stderr
    assert run.stdout == '{"id": "abc"}\n{"id": "abc"}\n', "each answer on a line of its own"
    sent = [(path, kind, json.loads(body)) for path, kind, body in _Recorder.seen]
    assert sent == [("/train", "application/json", {"from": "a file"}),
                    ("/predict", "application/json", {"inline": [1, 2]})]  # fmt: skip


def _body_model(path: str) -> Any:
    from app.api.routes.models import AliasBody
    from app.schemas.datasets import DatasetCreate
    from app.schemas.inference import EvaluateRequest, PredictRequest
    from app.schemas.recipes import GpuSmokeRequest
    from app.schemas.train import TrainRequest

    if re.fullmatch(r"/models/[^/]+/aliases/[^/]+", path):
        return AliasBody
    models = {"/train": TrainRequest, "/predict": PredictRequest, "/evaluate": EvaluateRequest,
              "/recipes/gpu-smoke": GpuSmokeRequest, "/datasets": DatasetCreate}  # fmt: skip
    return models[path]


def requests_in(path: Path) -> list[tuple[str, Any]]:
    """(endpoint, body) of every request body the page's shell examples send: ``post PATH BODY`` (``@file`` or
    inline JSON), ``curl ... localhost:8000/PATH ... -d BODY`` and ``echo BODY | sparktrain evaluate -``."""
    found: list[tuple[str, Any]] = []
    for block in blocks(path, "bash"):
        words = shell_tokens(block)
        for i, word in enumerate(words):
            if word == "post" and i + 2 < len(words) and words[i + 1].startswith("/"):
                body = words[i + 2]
                text = (REPO / body[1:]).read_text() if body.startswith("@") else body
                found.append((words[i + 1], json.loads(text)))
            elif word == "curl":
                command = list(itertools.takewhile(lambda w: w not in "|;()", words[i + 1 :]))
                url = next((w for w in command if "localhost:8000" in w), "")
                if "-d" in command and not command[command.index("-d") + 1].startswith("$"):  # not a helper's
                    endpoint = urlparse("http://" + url.split("localhost:8000", 1)[0] + url).path
                    found.append((endpoint or "/", json.loads(command[command.index("-d") + 1])))
            elif word == "echo" and words[i + 2 : i + 6] == ["|", "sparktrain", "evaluate", "-"]:
                found.append(("/evaluate", json.loads(words[i + 1])))
    return found


@pytest.mark.parametrize("name", WALKED)
def test_every_body_the_shell_examples_send_is_a_valid_request(name: str) -> None:
    for endpoint, body in requests_in(REPO / name):
        _body_model(endpoint).model_validate(body)  # raises, naming the field, when the page is wrong


def test_the_request_finder_finds_the_readmes_requests() -> None:
    found = [endpoint for endpoint, _ in requests_in(REPO / "README.md")]
    assert found == ["/train", "/train", "/predict", "/train", "/evaluate"], found


@pytest.mark.parametrize("name", WALKED)
def test_the_files_the_examples_use_are_shipped(name: str) -> None:
    """``sparktrain submit FILE``, ``predict --csv FILE`` and ``post ... @FILE`` name files of the repository (cli.md
    used ``rows.csv`` and ``body.json``, which no newcomer has)."""
    for block in blocks(REPO / name, "bash"):
        words = shell_tokens(block)
        for i, word in enumerate(words[:-1]):
            if word in ("submit", "--csv") or (word.startswith("@") and words[i - 1] != "-d"):
                file = words[i + 1] if not word.startswith("@") else word[1:]
                if file != "-" and not file.startswith("$"):
                    assert (REPO / file).is_file(), f"{name}: {word} {file}: not in the repository"


def test_the_shipped_rows_fit_the_taxi_models() -> None:
    header = (REPO / "examples" / "taxi-rows.csv").read_text().splitlines()[0].split(",")
    features = json.loads((REPO / "examples" / "xgboost-taxi.json").read_text())["dataset"]["features"]
    assert set(features) <= set(header) and header[0], header


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("name", WALKED)
def test_the_shell_examples_parse(name: str) -> None:
    for block in blocks(REPO / name, "bash"):
        script = re.sub(r"<([a-z][a-z0-9 -]*)>", "PLACEHOLDER", block)  # <id> stands for a value
        run = subprocess.run(["bash", "-n"], check=False, input=script, capture_output=True, text=True, timeout=30)
        assert run.returncode == 0, f"{name}: {run.stderr}\n{block}"


def undefined_names(source: str) -> set[str]:
    """Names a snippet reads that it neither defines, imports nor gets from builtins (examples.md's ``job_id``)."""
    tree = ast.parse(source)
    defined = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.alias):
            defined.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:  # except ApiError as exc:
            defined.add(node.name)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - defined


@pytest.mark.parametrize("name", WALKED)
def test_the_python_examples_define_what_they_use(name: str) -> None:
    for block in blocks(REPO / name, "python"):
        assert not undefined_names(block), f"{name}: {undefined_names(block)} undefined in\n{block}"


def test_the_name_checker_finds_an_undefined_name() -> None:
    assert undefined_names("import httpx\njob = httpx.get(f'/jobs/{job_id}')\nprint(job, e.x)") == {"job_id", "e"}
    assert not undefined_names("with open('x') as f:\n    rows = [r for r in f]\nprint(rows, len)")
    assert not undefined_names("try:\n    pass\nexcept OSError as exc:\n    print(exc)")


def test_the_readme_starts_with_the_two_set_up_commands() -> None:
    first = blocks(REPO / "README.md", "bash")[0]
    assert [line.split("#")[0].strip() for line in first.splitlines()] == ["make run", "make test"]
