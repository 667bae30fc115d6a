"""Cross-references of the docs (issue 40): every ``docs/design.md §n`` cited anywhere in the
repository names a section that exists, the benchmark reports link their history, and the
design documents keep decisions, not run logs."""
import fnmatch
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

# "docs/design.md §2.9", "design.md §1, §5", "(docs/design.md) §8", "design.md §2.8 and §3.3"
_CITE = re.compile(r"design\.md\)?((?:(?:,| and| or)? ?§\d+(?:\.\d+)*)+)")
_SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
_HEADING = re.compile(r"^#{2,6} §(\d+(?:\.\d+)*)\s", re.M)
_SOURCES = ("*.py", "*.md", "*.cpp", "*.hpp", "*.cu", "*.h", "*.yaml", "*.ipynb", "*.sh",
            "*.txt", "*.toml", "*.rst")
_SKIP = {".venv", "build", ".git", "daskwp-output", "_build", "_notebooks", "node_modules"}


def design_sections(text):
    return set(_HEADING.findall(text))


def cited_sections(text):
    """Each (section, line number) a text cites as ``design.md §n``."""
    out = []
    for m in _CITE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.extend((s.rstrip("."), line) for s in _SECTION.findall(m.group(1)))
    return out


def repository_files():
    """The files of the repository that match ``_SOURCES``, outside the ``_SKIP`` folders
    (one walk that does not enter them: a walk per pattern through ``.venv`` took ~8 CPU s
    of the two tests that read these files)."""
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP)
        for name in sorted(files):
            path = Path(folder) / name
            if any(fnmatch.fnmatchcase(name, p) for p in _SOURCES) and path.is_file():
                yield path


def test_citation_parser_reads_lists_and_rejects_missing_sections():
    text = "see docs/design.md §1, §5 and docs/design.md §2.9.\n(docs/design.md) §8 x §7"
    assert [s for s, _ in cited_sections(text)] == ["1", "5", "2.9", "8"]
    sections = design_sections("## §1 A\n### §2.9 B\n## §8 C\n##§9 not a heading\n")
    assert sections == {"1", "2.9", "8"}
    assert {s for s, _ in cited_sections(text)} - sections == {"5"}


def test_every_cited_design_section_exists():
    sections = design_sections((ROOT / "docs" / "design.md").read_text(encoding="utf-8"))
    assert {"1", "2.9", "3.5", "8"} <= sections
    missing = []
    n = 0
    for path in repository_files():
        for section, line in cited_sections(path.read_text(encoding="utf-8", errors="replace")):
            n += 1
            if section not in sections:
                missing.append(f"{path.relative_to(ROOT)}:{line}: §{section}")
    assert n > 100, n            # the repository cites the design document throughout
    assert not missing, "docs/design.md has no such section:\n" + "\n".join(missing)


def reports():
    return sorted(p for p in RESULTS.glob("*.md") if p.name != "HISTORY.md")


@pytest.mark.parametrize("report", reports(), ids=lambda p: p.name)
def test_every_report_links_the_history(report):
    assert "[HISTORY.md](HISTORY.md)" in report.read_text(encoding="utf-8")


def test_history_names_the_runs_the_reports_hold():
    history = (RESULTS / "HISTORY.md").read_text(encoding="utf-8")
    cpu = (RESULTS / "cpu_bench.md").read_text(encoding="utf-8")
    commit = re.search(r"\(git ([0-9a-f]{7,})\)", cpu).group(1)
    held = [row for row in history.splitlines() if "the report file holds it" in row]
    assert len(held) == 2, held          # one row each for cpu_bench and pipeline_bench
    assert commit in held[0], (commit, held[0])
    pipeline = (RESULTS / "pipeline_bench.md").read_text(encoding="utf-8")
    date = re.search(r"\((\d{4})-(\d\d-\d\d \d\d:\d\d)", pipeline).group(2)
    assert date in held[1], (date, held[1])


# A benchmark figure: "595.0 MB/s", "39.1 -> 20.6 ms", "run 23", "313 instructions per".
_FIGURE = re.compile(r"\d+(?:\.\d+)? ?(?:MB/s|GB/s|ms\b)|\b[Rr]un \d+\b|\b[Rr]uns \d+(?:-| and )\d+"
                     r"|instructions per (?:input )?byte")


@pytest.mark.parametrize("doc", ["docs/design.md"])
def test_design_documents_hold_no_run_logs(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    found = [m.group(0) for m in _FIGURE.finditer(text)]
    assert not found, f"{doc} holds benchmark figures (move them to HISTORY.md): {found[:10]}"


# 'README section "Dask"', 'README "Differences from HuggingFace"', "the README's "GPU""
_README_CITE = re.compile(r"README(?:'s)?,?(?: section)? \"([^\"]+)\"")


def test_cited_readme_sections_exist():
    headings = {h.strip().lower() for h in
                re.findall(r"^#{1,6} +(.+)$", (ROOT / "README.md").read_text("utf-8"), re.M)}
    assert _README_CITE.findall('see README section "Dask" and README "GPU"') == ["Dask", "GPU"]
    missing = []
    for path in repository_files():
        if path.name == "test_docs_refs.py":
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in _README_CITE.finditer(text):
            if " ".join(m.group(1).split()).lower() not in headings:
                line = text.count("\n", 0, m.start()) + 1
                missing.append(f"{path.relative_to(ROOT)}:{line}: README \"{m.group(1)}\"")
    assert not missing, "README.md has no such section:\n" + "\n".join(missing)


# -- README's performance table is the latest report's ------------------------------------

def _table_after(text, heading):
    """The rows (lists of cells) of the first Markdown table after ``heading``."""
    rows, seen = [], False
    for line in text[text.index(heading):].splitlines()[1:]:
        if line.startswith("|"):
            seen = True
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                rows.append(cells)
        elif seen:
            break
    return rows


def readme_performance(readme, report):
    """(README rows, the report's rows for the same corpora, the report's date and commit)."""
    mine = _table_after(readme, "## Performance")
    header, *theirs = _table_after(report, "## Single core")
    col = {name: header.index(name) for name in
           ("corpus", "daskwp encode MB/s (1 core)", "HF MB/s (1 core)", "ratio daskwp/HF")}
    by_corpus = {r[col["corpus"]]: [r[col[c]] for c in col] for r in theirs}
    stamp = re.search(r"\(git ([0-9a-f]+)\).*?; (\d{4}-\d\d-\d\d \d\d:\d\d)", report)
    return mine[1:], [by_corpus.get(r[0]) for r in mine[1:]], stamp.group(2), stamp.group(1)


def test_readme_performance_equals_the_latest_report():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    report = (RESULTS / "cpu_bench.md").read_text(encoding="utf-8")
    mine, theirs, date, commit = readme_performance(readme, report)
    assert len(mine) == 8, mine                      # every corpus of the report
    assert mine == theirs, "README's table differs from benchmarks/results/cpu_bench.md"
    section = readme[readme.index("## Performance"):]
    section = section[:section.index("\n## ", 1)]
    assert date in section and commit in section, (date, commit)
    assert "AMD EPYC" in report and "AMD EPYC" in section    # the machine, named


def test_the_performance_check_sees_a_changed_figure():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    report = (RESULTS / "cpu_bench.md").read_text(encoding="utf-8")
    mine, _, _, _ = readme_performance(readme, report)
    figure = mine[0][1]                                  # the first corpus's MB/s
    changed = report.replace(f"| {figure} |", f"| {figure}1 |", 1)
    assert changed != report
    mine, theirs, _, _ = readme_performance(readme, changed)
    assert mine != theirs


def test_readme_is_short_and_answers_the_newcomers_questions():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250, "README.md: keep it to 250 lines; details go to docs/"
    table = readme[readme.index("## How do I"):]
    table = table[:table.index("\n## ", 1)]
    for question in ("Parquet column on a cluster", "read the result back as tensors",
                     "QA preprocessing", "different from HuggingFace", "job was refused"):
        row = next((r for r in table.splitlines() if question in r), None)
        assert row and "](docs/" in row, f"the How do I table has no page for {question!r}"


def test_readme_lists_every_extra():
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"][
        "optional-dependencies"]
    install = (ROOT / "README.md").read_text(encoding="utf-8")
    install = install[install.index("## Install"):install.index("## Quick start")]
    missing = [name for name in extras if f"`{name}`" not in install]
    assert not missing, f"README's extras table lacks {missing}"
