"""The documentation site: the algorithm reference generated from the registry
(docs/hooks/algorithms.py) and, when `make docs` has built it, the site in site/."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "site"


def _own_algorithms() -> dict:
    """gossipfl's own algorithms (other tests register plugins into the same registry)."""
    from gossipfl.algorithms import available_algorithms

    return {name: cls for name, cls in available_algorithms().items()
            if cls.__module__.startswith("gossipfl.algorithms.")}


def _hook():
    pytest.importorskip("mkdocs")
    spec = importlib.util.spec_from_file_location("docs_hook", ROOT / "docs/hooks/algorithms.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_algorithm_gets_a_page_with_its_paper_parameters_and_math():
    hook = _hook()
    algorithms = _own_algorithms()
    index = hook._index(algorithms)
    for name, cls in algorithms.items():
        assert f"[`{name}`]({name}.md)" in index
        page = hook._page(name, cls)
        assert cls.paper.split(",")[0] in page
        # a docstring's indented equation block becomes display math
        doc = sys.modules[cls.__module__].__doc__
        has_block = any(line.startswith("    ") for line in inspect.cleandoc(doc).splitlines())
        assert has_block and "\\begin{aligned}" in page, f"{name}: no update-rule block"
        if dataclasses.is_dataclass(cls.Params):
            for field in dataclasses.fields(cls.Params):
                assert f"`algorithm.{field.name}`" in page


def test_docstring_equations_become_tex():
    hook = _hook()
    tex = hook._math_block(["    x_i^{t+1} = Σ_l w_il z_l^t − η ∇F_i(x; ξ)      only the body"])
    assert "\\sum" in tex and "\\eta" in tex and "\\nabla" in tex and "w_{il}" in tex
    assert "\\text{ only the body }" in tex


def test_an_algorithm_without_paper_or_docstring_fails_the_build():
    hook = _hook()
    from mkdocs.exceptions import PluginError

    from gossipfl.algorithms import Algorithm

    class Nameless(Algorithm):
        name = "nameless"
        paper = ""

    with pytest.raises(PluginError, match="no paper"):
        hook._page("nameless", Nameless)


@pytest.mark.skipif(not (SITE / "index.html").exists(), reason="site not built (make docs)")
def test_built_site_has_mathjax_and_every_algorithm():
    assert (SITE / "javascripts/vendor/mathjax/tex-svg-full.js").stat().st_size > 1_000_000
    pages = {name: (SITE / "algorithms" / name / "index.html").read_text(encoding="utf-8")
             for name in _own_algorithms()}
    for name, html in pages.items():
        assert "tex-svg-full.js" in html and "mathjax-config.js" in html
        assert f"<code>{name}</code>" in html
    assert 'class="arithmatex"' in pages["oledfl"]


def test_readme_names_every_algorithm_and_topology():
    """The README's tables list every registered algorithm and topology (a new one must be
    added there in the same commit)."""
    import re

    from gossipfl.topology.graphs import TOPOLOGIES  # gossipfl's own (tests add plugins)

    readme = (ROOT / "README.md").read_text()
    named = set(re.findall(r"`([a-z0-9_]+)`", readme))
    assert set(_own_algorithms()) - named == set()
    assert set(TOPOLOGIES) - named == set()
