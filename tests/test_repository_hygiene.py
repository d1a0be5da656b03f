"""The project speaks of itself only: no development-session numbers, issue numbers or commit hashes in its prose,
and no session tags in its file names. A sentence that needs a point in time says a date or a version.

Scanned: README.md and the other top-level pages, docs/, sead/, tests/, configs/, scripts/ and benchmarks/.
Session and issue numbers written out are refused anywhere in a text file. Commit hashes and bare issue references
(a hash sign and a number) are refused in prose only: Markdown outside code, Python comments and docstrings, C++
comments, and the comments of YAML and shell files. A command that names a revision (`before_after.py --before
REV`), a colour in code and data such as SHA-256 digests in JSON results are not prose."""

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("docs", "sead", "tests", "configs", "scripts", "benchmarks")
TEXT = {".py", ".md", ".yaml", ".yml", ".sh", ".txt", ".cff", ".h", ".cpp"}
SKIP = {"__pycache__", ".venv", ".pytest_cache"}

# the word for a development session, or for an issue or pull request, followed by a number; a hash sign and a number
SESSION = re.compile(r"\bsessions?[\s-]+\d+", re.IGNORECASE)
ISSUE = re.compile(r"\b(?:issues?|PRs?|pull requests?)[\s-]*#?\d+", re.IGNORECASE)
ISSUE_REF = re.compile(r"(?<![\w&#/.-])#\d+\b")
# 7-40 hex digits holding both a digit and a letter: what git prints for a commit
HASH = re.compile(r"(?<![\w.-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
SESSION_TAG = re.compile(r"_s\d{2}(?=[._]|$)")

_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"(`+)[^`].*?\1", re.DOTALL)
_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_HASH_COMMENT = re.compile(r"(?:^|\s)#[^\n]*")


def files() -> list[Path]:
    roots = [p for p in ROOT.iterdir() if p.is_file()] + [ROOT / f for f in FOLDERS]
    out = []
    for root in roots:
        paths = [root] if root.is_file() else root.rglob("*")
        out += [p for p in paths if p.is_file() and not SKIP & set(p.relative_to(ROOT).parts)]
    return sorted(out)


def python_prose(source: str) -> str:
    """The comments and docstrings of a Python source."""
    parts = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline) if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                parts.append(doc)
    return "\n".join(parts)


def prose(path: Path, text: str) -> str:
    """The part of a file that is prose, where commit hashes are looked for."""
    if path.suffix == ".md":
        return _SPAN.sub("", _FENCE.sub("", text))
    if path.suffix == ".py":
        return python_prose(text)
    if path.suffix in (".h", ".cpp"):
        return "\n".join(_C_COMMENT.findall(text))
    return "\n".join(_HASH_COMMENT.findall(text))


def problems(path: Path, text: str) -> list[str]:
    found = [m.group(0) for rx in (SESSION, ISSUE) for m in rx.finditer(text)]
    return found + [m.group(0) for rx in (ISSUE_REF, HASH) for m in rx.finditer(prose(path, text))]


TEXT_FILES = [p for p in files() if p.suffix in TEXT and p.name != "LICENSE"]


@pytest.mark.parametrize("path", TEXT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_session_issue_or_commit_numbers(path):
    found = problems(path, path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)}: {found}; say what the thing is, with a date or version if needed"


def test_no_session_tags_in_file_names():
    tagged = [str(p.relative_to(ROOT)) for p in files() if SESSION_TAG.search(p.name) or "session" in p.name.lower()]
    assert tagged == []


def test_the_scan_covers_the_tree():
    scanned = {str(p.relative_to(ROOT)) for p in TEXT_FILES}
    assert {"README.md", "sead/metrics.py", "benchmarks/learning_curve.py", "configs/sead.yaml"} <= scanned
    assert "scripts/main.sh" in scanned and any(s.startswith("docs/") for s in scanned)


# The words this test looks for, spelt in pieces so that this file passes its own scan.
S, I, H = "sess" + "ion", "iss" + "ue", "66a" + "9453"


@pytest.mark.parametrize(
    "text",
    [f"measured in {S} 39", f"{S}s 45-49", f"the {S}-60 run", f"{I} 17", f"{I} #18", f"see #1{7}", f"PR #{3}"],
)
def test_session_and_issue_numbers_are_found(text):
    assert problems(Path("x.md"), text)


@pytest.mark.parametrize(
    "text",
    [
        "a run of 2026-11-30, version 0.1.0, reading 7",
        f"a {S} of the HTTP client",
        "the colour `#888` and row 3",
        "sha256 " + "ab12" * 16,
        "ratio 1.9875691500e-4",
    ],
)
def test_ordinary_words_and_numbers_pass(text):
    assert problems(Path("x.md"), text) == []


def test_colours_in_code_are_not_issue_references():
    assert problems(Path("x.py"), 'COLOUR = "#888"  # grey\n') == []
    assert problems(Path("x.py"), "# fixed in #12" + "3\n") == ["#123"]


def test_commit_hashes_are_found_in_prose_only():
    assert problems(Path("x.md"), f"the code of {H} was slower") == [H]
    assert problems(Path("x.md"), f"run `before_after.py --before {H}`") == []
    assert problems(Path("x.py"), f'"""Measured against {H}."""\nREV = "{H}"  # the default\n') == [H]
    assert problems(Path("x.py"), f'REV = "{H}"  # the revision before the speed work\n') == []
    assert problems(Path("x.h"), f"// as of {H}\nconst float c = 1.9875691500e-4f;\n") == [H]
    assert problems(Path("x.yaml"), f"key: 1  # tuned at {H}\n") == [H]


def test_session_tags_in_names_are_found():
    assert SESSION_TAG.search("roofline_s53.json") and SESSION_TAG.search("learning_curve_dev_s59_ep2.json")
    assert not SESSION_TAG.search("roofline_cuda.json") and not SESSION_TAG.search("update_steps.py")
