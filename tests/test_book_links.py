"""The book's relative references resolve: every {{#include}}, image and link in book/src points to
a file that exists, and every page under book/src is listed in SUMMARY.md (mdBook silently creates
an empty page for a missing SUMMARY entry, and silently leaves out a page that is not listed)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "book" / "src"
# book/src/results links to the repository's results/ so that mdBook copies the plots into the
# built book; its tables are included by pages, not pages themselves.
PAGES = sorted(p for p in SRC.rglob("*.md") if (SRC / "results") not in p.parents)

INCLUDE = re.compile(r"\{\{#include\s+([^}\s]+)\s*\}\}")
# [text](target) and ![alt](target); the target ends at whitespace (a title may follow) or ")".
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
EXTERNAL = ("http://", "https://", "mailto:", "#")


def references(page: Path) -> list[str]:
    """Relative targets referenced by a page: includes anywhere (mdBook expands them even inside
    code blocks and comments), links and images outside fenced code."""
    text = page.read_text(encoding="utf-8")
    targets = [m.group(1).split(":")[0] for m in INCLUDE.finditer(text)]
    prose = FENCE.sub("", text)
    targets += [m.group(1) for m in LINK.finditer(prose)]
    return [t.split("#")[0] for t in targets if not t.startswith(EXTERNAL)]


def test_book_has_pages() -> None:
    assert (SRC / "SUMMARY.md").is_file()
    assert len(PAGES) > 1


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(SRC)))
def test_every_reference_resolves(page: Path) -> None:
    missing = [t for t in references(page) if t and not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(SRC)} points to missing files: {missing}"


def test_every_page_is_in_summary() -> None:
    listed = {(SRC / t).resolve() for t in references(SRC / "SUMMARY.md")}
    unlisted = [str(p.relative_to(SRC)) for p in PAGES
                if p.name != "SUMMARY.md" and p.resolve() not in listed]
    assert not unlisted, f"pages missing from book/src/SUMMARY.md: {unlisted}"
