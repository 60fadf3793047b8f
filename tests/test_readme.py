"""The README's text DSL and command-line sections run as written."""

from __future__ import annotations

import shlex
from pathlib import Path

import numpy as np

from factorflow import cli
from tests.conftest import assert_close
from tests.test_docs import blocks

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def section_blocks(section: str, language: str) -> list[str]:
    """The ```language code blocks of the README section titled ``section``."""
    start = README.index(f"\n## {section}\n")
    end = README.find("\n## ", start + 1)
    return [code.strip("\n") + "\n" for code in
            blocks(README[start:end if end != -1 else None], language)]


def test_text_dsl_section_runs():
    (code,) = section_blocks("The text DSL", "python")
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    result = namespace["result"]
    assert result["mu"].mean.shape == (3,)
    assert result.converged and np.isfinite(result.log_evidence)


def test_command_line_section_runs(capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    (code,) = section_blocks("Command line", "bash")
    commands = [shlex.split(line) for line in code.splitlines() if line.strip()]
    assert [c[:2] for c in commands] == [["factorflow", "run"], ["factorflow", "compile"],
                                         ["factorflow", "demo"]]
    outputs = []
    for command in commands:
        assert cli.main(command[1:]) == 0
        outputs.append(capsys.readouterr().out)
    mean_row = outputs[0].splitlines()[3].split()
    assert mean_row[:2] == ["mean", "Gaussian"]
    assert_close(float(mean_row[2]), 5.9603207170807826, rtol=1e-5)
    assert outputs[1].startswith("program learning_gaussian (vmp)\nranges v_n=2\n")
    assert "P(both heads) = 0.250000" in outputs[2]
