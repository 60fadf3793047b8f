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
