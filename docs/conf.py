"""Sphinx configuration of the daskwp documentation (docs/README.md says how to build it).

Why Sphinx: dask, cuDF and pandas publish PyData Sphinx sites, so a user of this field knows
the shape (a user guide by task, an API reference generated from numpydoc docstrings, a
design section), and numpydoc is the docstring standard those projects' users read. MyST
lets the existing Markdown pages (design.md, batch-jobs.md, the generated options.md) be
pages of the site as they are, and myst-nb renders the notebooks without executing them
(they need a Dask cluster; the test suite executes them, tests/test_notebooks.py).
"""
import re
import shutil
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent

project = "daskwp"
author = "daskwp developers"
copyright = "2026, daskwp developers"

extensions = [
    "myst_nb",                 # Markdown pages (MyST) and notebooks
    "sphinx.ext.autodoc",
    "numpydoc",
]

html_theme = "pydata_sphinx_theme"
html_title = "daskwp"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}

exclude_patterns = ["_build", "README.md", "Thumbs.db", ".DS_Store"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}

# Notebooks are rendered as stored, not executed: they start Dask clusters.
nb_execution_mode = "off"
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 4

# numpydoc renders every public name's docstring; class member tables would need
# autosummary stubs, and the API page lists the members itself.
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"

# The notebooks live in notebooks/ at the repository root (the test suite runs them there);
# Sphinx reads only files under docs/, so the build copies them in (docs/_notebooks is ignored
# by git).
_NB = DOCS / "_notebooks"
if _NB.exists():
    shutil.rmtree(_NB)
_NB.mkdir()
for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
    shutil.copy2(nb, _NB / nb.name)


_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def _outside_links(app, docname, source):
    """A Markdown link from a page to a file of the repository outside docs/ (a benchmark
    report) becomes its text and the file's path: the site holds only docs/. A link to a
    file that does not exist is left alone, so the build fails on it (as it does on a broken
    link inside docs/); tests/test_docs_site.py checks every relative link as well."""
    page = Path(app.env.doc2path(docname))
    if page.suffix != ".md":
        return

    def repl(m):
        target = m.group(2)
        if "://" in target or target.startswith("mailto:"):
            return m.group(0)
        path = (page.parent / target).resolve()
        if path.exists() and DOCS not in path.parents:
            rel = str(path.relative_to(ROOT))
            return f"`{rel}`" if m.group(1).strip("`") == rel else f"{m.group(1)} (`{rel}`)"
        return m.group(0)

    source[0] = _LINK.sub(repl, source[0])


def setup(app):
    app.connect("source-read", _outside_links)
