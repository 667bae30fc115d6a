"""The documentation site (issue 40): docs/ builds with Sphinx with warnings as errors, every
relative link of the Markdown documents leads to a file and heading that exist, and the API
page documents every public name.

External links (http...) are not checked: the build machines have no network. The internal
ones are checked twice: by the Sphinx build (-W fails on a link to a missing page) and by
``test_relative_links_resolve`` below, which also covers README.md and benchmarks/ (not
part of the site) and the ``#anchor`` of each link.
"""
import re
import subprocess
import sys
from pathlib import Path

import pytest

import daskwp

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

_LINK = re.compile(r"(?<!!)\[(?:[^\]\n]|\][^(])*?\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)


def slug(heading):
    """The anchor GitHub and MyST (``myst_heading_anchors``) give a heading."""
    text = re.sub(r"`|\*\*|\*", "", heading.strip()).lower()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path):
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(h) for h in _HEADING.findall(text)}


def markdown_files():
    files = [ROOT / "README.md", *DOCS.rglob("*.md"), *(ROOT / "benchmarks").rglob("*.md")]
    return [f for f in files if "_build" not in f.parts and "_notebooks" not in f.parts]


def broken_links(path):
    """Each relative link of a Markdown file whose file or heading does not exist."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)
    bad = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):        # http:, https:, mailto: (not checked)
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    return bad


def test_slugs_and_the_link_checker_find_what_is_broken(tmp_path):
    assert slug("§2.9 Offsets, word ids and the special-tokens mask") == \
        "29-offsets-word-ids-and-the-special-tokens-mask"
    assert slug("Megatron indexed datasets (`output_format: megatron`)") == \
        "megatron-indexed-datasets-output_format-megatron"
    (tmp_path / "b.md").write_text("# Title\n\n## A part\n")
    page = tmp_path / "a.md"
    page.write_text("[ok](b.md#a-part) [no file](c.md) [no heading](b.md#other) "
                    "[web](https://example.org/x) [self](#here)\n\n## Here\n\n"
                    "```\n[in code](nowhere.md)\n```\n")
    assert broken_links(page) == ["c.md: no such file", "b.md#other: no heading #other in b.md"]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    assert not broken_links(path), broken_links(path)


def test_api_page_documents_every_public_name():
    page = (DOCS / "api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^\.\. auto(?:class|function|module):: daskwp\.(\w+)$", page, re.M))
    public = set(daskwp.__all__) - {"__version__"}
    assert public - documented == set(), "add them to docs/api.md"
    assert documented - public == set(), "docs/api.md documents names daskwp does not export"


@pytest.mark.slow
def test_site_builds_with_warnings_as_errors(tmp_path):
    pytest.importorskip("sphinx", reason="pip install -e '.[docs]'")
    pytest.importorskip("pydata_sphinx_theme", reason="pip install -e '.[docs]'")
    run = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going",
                          "-E", "-q", "-d", str(tmp_path / "doctrees"), str(DOCS),
                          str(tmp_path / "html")],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log
    # numpydoc reports docstring sections it drops as Python warnings, which -W does not see
    assert "Warning" not in log, log
    html = (tmp_path / "html")
    for page in ("index", "guide/tokenize", "batch-jobs", "options", "differences-hf", "api",
                 "design", "gpu", "benchmarks", "_notebooks/01-quickstart"):
        assert (html / f"{page}.html").is_file(), page
    api = (html / "api.html").read_text(encoding="utf-8")
    assert 'id="daskwp.WordPieceTokenizer.encode"' in api
    assert api.count(">Examples<") >= len(set(daskwp.__all__) - {"__version__"})


def table_shapes(text):
    """(line number, cells) of each row of each Markdown table outside code fences."""
    text = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.startswith("|"):
            continue
        line = re.sub(r"`[^`\n]*`", "code", line.replace("\\|", ""))
        rows.append((n, line.strip().strip("|").count("|") + 1))
    return rows


def malformed_tables(text):
    """Rows of a table whose cell count differs from its header's."""
    bad, header, last = [], None, None
    for n, cells in table_shapes(text):
        if last is None or n != last + 1:
            header = cells
        elif cells != header:
            bad.append(f"line {n}: {cells} cells under a header of {header}")
        last = n
    return bad


def test_the_table_checker_finds_malformed_tables():
    good = "| a | b |\n|---|---|\n| `x | y` | 2 |\n\n| c |\n|---|\n"
    assert malformed_tables(good) == []
    assert malformed_tables("| a | b | c |\n|---|---|---|---|\n| 1 | 2 | 3 |\n") == \
        ["line 2: 4 cells under a header of 3"]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_tables_are_well_formed(path):
    assert not malformed_tables(path.read_text(encoding="utf-8"))


# -- the user guide's examples run, as the README's do (tests/test_readme.py's harness) ------

def guide_blocks():
    from test_readme import python_blocks
    out = []
    for page in sorted((DOCS / "guide").glob("*.md")):
        out += [(page, line, code) for line, code in python_blocks(page.read_text("utf-8"))]
    return out


@pytest.fixture(scope="module")
def guide_scratch(tmp_path_factory):
    from test_readme import _scratch
    return _scratch(tmp_path_factory.mktemp("guide"))


@pytest.mark.parametrize("page,line,code", [
    pytest.param(p, n, c, marks=[pytest.mark.slow] if "connect(" in c else [],  # a cluster
                 id=f"{p.name}:{n}") for p, n, c in guide_blocks()])
def test_guide_python_block_runs(page, line, code, guide_scratch, monkeypatch):
    from test_readme import _close_clients, _missing_optional, _reader
    monkeypatch.chdir(guide_scratch)
    namespace = {"__name__": "__guide__", **_reader()}
    try:
        exec(compile("\n" * (line - 1) + code, str(page), "exec"), namespace)
    except Exception as e:
        missing = _missing_optional(e) or ("torch" if "PyTorch is not installed" in str(e)
                                           else None)
        if missing:
            pytest.skip(f"{page.name} line {line}: the block needs {missing}, not installed")
        raise
    finally:
        _close_clients(namespace)
