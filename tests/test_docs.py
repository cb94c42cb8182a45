"""The documentation holds together: every relative link in README.md, CHANGELOG.md, bench/README.md,
docker/README.md and docs/ resolves inside the repository (files and ``#anchors``), the README stays a front door,
and no page points at documents outside the repository."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote

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
