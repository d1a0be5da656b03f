"""Every relative link and image in the user-facing Markdown (README.md, the other top-level pages, docs/ and
benchmarks/README.md) points at a file or folder of the repository. Anchors (`page.md#section`) are not checked;
links to other sites are not followed. Links inside code (fenced blocks, `spans`) are not links."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted(
    [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md"), ROOT / "benchmarks" / "README.md"],
    key=lambda p: str(p),
)

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"(`+)[^`].*?\1", re.DOTALL)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
# [text](target "title") and ![alt](target); the target ends at whitespace or the closing parenthesis
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+[\"'(][^)]*)?\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.MULTILINE)
_HTML = re.compile(r"""<(?:img|a)\b[^>]*?\b(?:src|href)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def links(markdown: str) -> list[str]:
    """The link and image targets of a Markdown text, outside code and comments."""
    text = _COMMENT.sub("", _SPAN.sub("", _FENCE.sub("", markdown)))
    return [m.group(1) for rx in (_INLINE, _REFERENCE, _HTML) for m in rx.finditer(text)]


def broken(page: Path) -> list[str]:
    """The relative targets of `page` that resolve to nothing, with the line they are on."""
    out = []
    text = page.read_text(encoding="utf-8")
    for target in links(text):
        if _EXTERNAL.match(target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0].split("?", 1)[0]
        resolved = (ROOT / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
        if not resolved.exists():
            out.append(target)
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    missing = broken(page)
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_the_pages_are_found():
    names = {str(p.relative_to(ROOT)) for p in PAGES}
    assert {"README.md", "docs/quickstart.md", "benchmarks/README.md"} <= names


def test_links_are_read_from_prose_not_from_code():
    md = (
        'See [the guide](docs/guide.md#setup) and ![plot](img/a.png "a plot").\n'
        "[ref]: other/page.md\n"
        '<img src="pics/b.png" alt="">\n'
        "`[not](a/link.md)` and\n```\n[nor](this.md)\n```\n<!-- [hidden](x.md) -->\n"
        "[web](https://example.org/x.md) [anchor](#top)\n"
    )
    assert links(md) == ["docs/guide.md#setup", "img/a.png", "https://example.org/x.md", "#top", "other/page.md",
                         "pics/b.png"]  # fmt: skip


def test_a_missing_target_is_reported(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("x")
    page.write_text("[ok](there.md) [gone](missing/file.md#a) [site](https://example.org) [top](#top)\n")
    assert broken(page) == ["missing/file.md#a"]
