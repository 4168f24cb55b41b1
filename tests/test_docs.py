"""The README, the guide in docs/ and the examples' README: every relative link reaches a file of the
repository, and the README names the file of each link in its text, since the package page that shows
the README has no files to link to."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "examples" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)\)")


def relative_links(page: pathlib.Path) -> list[tuple[str, str]]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # links in code blocks are code
    return [(label, target) for label, target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_reach_files(page):
    links = relative_links(page)
    missing = [t for _, t in links if not (page.parent / t.split("#")[0]).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_readme_links_name_their_files():
    links = relative_links(ROOT / "README.md")
    assert links
    unnamed = [(label, target) for label, target in links if target.split("#")[0] not in label]
    assert not unnamed, f"README links whose text does not name the file: {unnamed}"
