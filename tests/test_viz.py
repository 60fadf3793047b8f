"""Diagrams render to SVG (with Graphviz's dot or the graphviz-pure port from the test
extra), and say how to install Graphviz where neither exists."""

import re
import shutil

import numpy as np
import pytest

import factorflow as ff
import factorflow.viz as viz
from tests.conftest import gaussian_mixture


def mixture() -> ff.Model:
    return gaussian_mixture(np.arange(6.0), components=3, learn_precision=True)


def svg_texts(svg: bytes) -> set[str]:
    return set(re.findall(r"<text[^>]*>([^<]*)</text>", svg.decode()))


def test_mixture_svg_names_every_variable_and_factor() -> None:
    assert viz.renderer() is not None, "the test extra installs graphviz-pure"
    model = mixture()
    svg = model.to_graphviz().pipe("svg")
    assert svg.lstrip().startswith(b"<?xml") and b"<svg" in svg
    texts = svg_texts(svg)
    assert set(model.variables) <= texts
    assert {call.factor for call in model.statements} <= texts
    assert {"k (3)", "n (6)", "Switch(z)"} <= texts


def test_schedule_diagram_renders_too(tmp_path) -> None:
    compiled = mixture().compile("vmp", init=["means"])
    diagram = compiled.schedule.to_graphviz()
    assert isinstance(diagram, viz.Diagram) and isinstance(diagram, str)
    path = diagram.render(tmp_path / "schedule.svg")
    assert path.read_bytes().startswith(b"<?xml")
    assert "loop 1" in svg_texts(path.read_bytes())


def test_diagram_is_graphviz_source_compatible(tmp_path) -> None:
    diagram = mixture().to_graphviz()
    assert diagram.source == str(diagram)
    source = diagram.to_source()
    import graphviz
    assert isinstance(source, graphviz.Source) and source.source.strip() == diagram.source
    png = diagram.render(tmp_path / "model.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(diagram._repr_mimebundle_()) == {"image/svg+xml"}


def test_without_graphviz_the_error_says_how_to_install(monkeypatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    diagram = mixture().to_graphviz()
    with pytest.raises(ff.RenderError, match="apt-get install graphviz") as err:
        diagram.pipe("svg")
    assert "pip install graphviz-pure" in str(err.value)
    assert diagram._repr_mimebundle_() == {"text/plain": diagram.source}
    assert "cluster" in diagram       # the DOT source needs nothing installed


def test_render_errors_name_the_problem(tmp_path) -> None:
    diagram = viz.Diagram("digraph { a -> }")
    with pytest.raises(ff.RenderError, match="failed to render the diagram as svg"):
        diagram.pipe("svg")
    with pytest.raises(ff.RenderError, match="give a format"):
        mixture().to_graphviz().render(tmp_path / "noextension")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed "
                    "(apt-get install graphviz); graphviz-pure renders the other tests")
def test_system_dot_renders_through_the_graphviz_package() -> None:
    assert viz.renderer() == "dot"
    assert set(mixture().variables) <= svg_texts(mixture().to_graphviz().pipe("svg"))
