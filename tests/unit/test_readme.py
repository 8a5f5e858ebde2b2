"""The README is a short front page: at most 260 lines, its first lines keep the two fresh-machine commands,
and every link it makes into docs/ (and from there on) names a file that exists and, with an anchor, a
heading of that file, so nothing moved out of it is out of reach."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def local_links(path: Path) -> list[tuple[Path, str]]:
    """(target file, anchor) of each relative link of a markdown file, resolved from its folder."""
    out = []
    for target in LINK.findall(FENCE.sub("", path.read_text())):
        if re.match(r"^(https?:|mailto:)", target):
            continue
        file, _, anchor = target.partition("#")
        out.append(((path.parent / file).resolve() if file else path, anchor))
    return out


def test_the_readme_is_a_short_front_page_with_the_two_commands_first() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 260, f"README.md has {len(lines)} lines: move detail to docs/"
    head = "\n".join(lines[:20])
    assert "make demo" in head and "make test" in head


def test_every_link_of_the_readme_and_docs_resolves() -> None:
    readme = ROOT / "README.md"
    linked_docs = {t for t, _ in local_links(readme) if t.parent == ROOT / "docs" and t.suffix == ".md"}
    assert len(linked_docs) >= 10, sorted(linked_docs)
    for page in [readme, *sorted((ROOT / "docs").glob("*.md"))]:
        for target, anchor in local_links(page):
            where = f"{page.relative_to(ROOT)} links to {target}"
            assert target.exists(), where
            if anchor and target.suffix == ".md":
                assert anchor in anchors(target), f"{where}#{anchor}: no such heading"


def test_every_page_of_docs_is_linked_from_the_readme() -> None:
    linked = {t for t, _ in local_links(ROOT / "README.md")}
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert missing == [], f"docs/ pages the README does not link: {missing}"
