"""Diagrams: DOT source that renders to SVG or PNG where a Graphviz program exists.

``model.to_graphviz()`` (the factor graph) and ``compiled.schedule.to_graphviz()`` (the
schedule's dependency graph) return a ``Diagram``: the DOT source itself (a ``str``, so
it prints, compares and saves as text) with the rendering methods of
``graphviz.Source`` — ``source``, ``pipe(format)``, ``render(path)`` and the rich
display Jupyter uses — and ``to_source()`` for a real ``graphviz.Source``.

Rendering runs Graphviz's ``dot`` program through the ``graphviz`` package; where ``dot``
is not installed it runs ``graphviz-pure`` (a self-contained port of ``dot``, ``pip install
graphviz-pure``) if that is, and otherwise raises ``ff.RenderError`` saying how to
install one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from factorflow.errors import RenderError

#: the programs that render DOT, in the order they are tried
RENDERERS = ("dot", "graphviz-pure")

INSTALL_HINT = ("install Graphviz's dot program (Debian/Ubuntu: `apt-get install graphviz`; "
                "macOS: `brew install graphviz`; conda: `conda install graphviz`), or the "
                "self-contained port with `pip install graphviz-pure`")


def quote(text: str) -> str:
    """``text`` as a DOT double-quoted string (backslashes, quotes and newlines escaped)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def renderer() -> str | None:
    """The first program of RENDERERS found on PATH, or None."""
    return next((name for name in RENDERERS if shutil.which(name)), None)


class Diagram(str):
    """DOT source (a ``str``) that renders like a ``graphviz.Source``."""

    @property
    def source(self) -> str:
        """The DOT source as a plain ``str``."""
        return str(self)

    def to_source(self) -> Any:
        """This diagram as a ``graphviz.Source`` (for the graphviz package's own API)."""
        import graphviz

        return graphviz.Source(self.source)

    def pipe(self, format: str = "svg", engine: str = "dot") -> bytes:
        """The rendered diagram in ``format`` ("svg", "png", ...), laid out by ``engine``.

        ``ff.RenderError`` if no Graphviz program is installed (saying how to install
        one) or if it fails (with its message)."""
        program = renderer()
        if program is None:
            raise RenderError(f"cannot render the diagram as {format}: no Graphviz program "
                              f"was found on PATH; {INSTALL_HINT}. The DOT source is "
                              "available without it (str(diagram)).")
        if program == "dot":
            import graphviz

            try:
                return self.to_source().pipe(format=format, engine=engine, quiet=True)
            except (graphviz.CalledProcessError, graphviz.RequiredArgumentError,
                    ValueError) as err:
                raise RenderError(f"dot failed to render the diagram as {format}: "
                                  f"{err}") from None
        done = subprocess.run([program, f"-K{engine}", f"-T{format}"],
                              input=self.source.encode(), capture_output=True, check=False)
        if done.returncode != 0:
            raise RenderError(f"{program} failed to render the diagram as {format}: "
                              f"{done.stderr.decode(errors='replace').strip()}")
        return done.stdout

    def render(self, path: str | os.PathLike[str], format: str | None = None,
               engine: str = "dot") -> Path:
        """Write the rendered diagram to ``path`` (``format`` from its suffix if not
        given: ``graph.svg``, ``graph.png``); returns the path."""
        path = Path(path)
        fmt = format or path.suffix.lstrip(".")
        if not fmt:
            raise RenderError(f"render({str(path)!r}): give a format, or a path ending in "
                              ".svg, .png, ...")
        path.write_bytes(self.pipe(fmt, engine))
        return path

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None
                          ) -> dict[str, Any]:
        """Jupyter's display: the SVG where a renderer exists, else the DOT text."""
        if renderer() is None:
            return {"text/plain": self.source}
        return {"image/svg+xml": self.pipe("svg").decode()}
