"""Every code block of the documentation (docs/*.md) runs as written.

The Python blocks of a page run in order in one namespace (their ``assert`` lines check
the numbers the page states); the ``factorflow`` lines of its bash blocks run through the
command line from the repository root.  With MkDocs installed the site builds with
``--strict`` (no broken links, every page in the navigation).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from factorflow import cli

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md"))


def blocks(text: str, language: str) -> list[str]:
    """The ```language blocks of ``text``, each preceded by blank lines so that line
    numbers in a traceback are the page's."""
    return ["\n" * text[:m.start(1)].count("\n") + m.group(1)
            for m in re.finditer(rf"```{language}\n(.*?)```", text, flags=re.S)]


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_page_code_runs(page, tmp_path, monkeypatch, capsys):
    text = page.read_text()
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # paths as from the root
    monkeypatch.chdir(tmp_path)  # and files a page writes land here
    for code in blocks(text, "python"):
        exec(compile(code, str(page), "exec"), namespace)
    capsys.readouterr()
    printed = []
    for code in blocks(text, "bash"):
        for line in code.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["factorflow"]:
                assert cli.main(words[1:]) == 0, line
                printed.append(capsys.readouterr().out)
    for shown in blocks(text, "text"):  # output a page shows is what a command printed
        assert any(shown.strip("\n") in out for out in printed), shown


def test_every_page_is_in_the_navigation():
    config = (ROOT / "mkdocs.yml").read_text()
    listed = set(re.findall(r":\s*(\S+\.md)\s*$", config, flags=re.M))
    assert listed == {p.name for p in PAGES}


@pytest.mark.slow
def test_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "gates" / "index.html").is_file()


def test_api_page_is_written_from_every_public_docstring():
    """docs/api.md's marker becomes one entry per public name and method, each with its
    docstring (and so its example), fences balanced."""
    import factorflow as ff
    from factorflow.runtime.compiled import CompiledModel
    from mkdocs_hooks import MARKER, on_page_markdown

    page = (ROOT / "docs" / "api.md").read_text()
    assert MARKER in page
    text = on_page_markdown(page, page=None)
    assert MARKER not in text and text.count("```") % 2 == 0
    headings = re.findall(r"^### `([\w.]+)", text, flags=re.M)
    assert [h for h in headings if h.startswith("ff.")] == [f"ff.{n}" for n in ff.__all__]
    for cls, method in [(ff.Model, "infer"), (CompiledModel, "run"), (ff.Result, "to_xarray")]:
        assert f"{cls.__name__}.{method}" in headings
    entry = text[text.index("### `ff.Dirichlet"):text.index("### `ff.Poisson")]
    assert "```pycon\n>>> with ff.Model() as model:" in entry
    # ``code`` spans become Markdown's `code`, also across a line break
    assert '`model.infer(...,\ndata={"name": value})`' in text and "``" not in text.replace(
        "```", "")
