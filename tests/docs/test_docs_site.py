"""The documentation site: the algorithm reference generated from the registry
(docs/hooks/algorithms.py) and, when `make docs` has built it, the site in site/."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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
        # long names may break after an underscore (<wbr>, docs/hooks/algorithms.py)
        assert f"<code>{name}</code>" in html.replace("<wbr>", "")
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


# -- a site that renders as written (issue 52) ----------------------------------------------
def _render():
    """docs/hooks/algorithms.py without mkdocs (its text functions need none)."""
    spec = importlib.util.spec_from_file_location("docs_render", ROOT / "docs/hooks/algorithms.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _outside_math(text: str) -> str:
    import re

    return re.sub(r"\\\(.*?\\\)|`[^`]*`", "", text)


def test_docstring_emphasis_stays_markdown_and_other_stars_are_literal():
    inline = _render()._inline
    assert inline("**W's spectrum.** D² needs it") == "**W's spectrum.** D² needs it"
    assert inline("**Reductions**: with *no* noise") == "**Reductions**: with *no* noise"
    assert inline("the optimum x* and a * b") == r"the optimum x\* and a \* b"


@pytest.mark.parametrize("prose", [
    "message m_{j→i} sees its own row",
    "x_i = z_i + (1 − ε) Σ_{j∈H_i} w_ij (z_j − z_i): with ε > 1 it moves",
    "Round t, every client i, with y_i^{t,0} = x_i^t and y_i^{t,−1} = y_i^{t,0} (reset):",
    "(z_i + Σ_kept m_{j→i}) / (d_i − 2b + 1); needs d_i ≥ 2b",
    ("CS+-RG (Gaucher, Dieuleveut & Hendrikx 2025): z_i + γ Σ_j w_ij CLIP(m_{j→i} − z_i, τ_i), "
     "τ_i the largest"),
    "round t (x_{i,K}^{−1} = x_i^0, so round 0 has no extrapolation)",
    "`honest_consensus` (1/|H|) Σ_{i∈H} ‖x_i − x̄_H‖²;",
])
def test_inline_notation_with_braces_becomes_math(prose):
    out = _render().inline_math(prose)
    assert r"\(" in out
    rest = _outside_math(out)
    assert "_{" not in rest and "^{" not in rest, out
    for math in __import__("re").findall(r"\\\((.*?)\\\)", out):
        assert math.count("{") == math.count("}") and math.count("(") == math.count(")"), out


def test_code_fences_tables_and_code_spans_are_left_alone():
    inline_math = _render().inline_math
    text = ("`m_{j}` in code\n\n```text\ny^{t+1} = W y^t\n```\n\n    x^{t+1} = W x^t\n\n"
            "| a | b |\n|---|---|\n| `x` | (1/|S_t|) Σ_{i∈S_t} Δ_i |\n")
    out = inline_math(text)
    assert "`m_{j}` in code" in out and "y^{t+1} = W y^t\n```" in out
    assert "    x^{t+1} = W x^t" in out
    assert out.count("|") == text.count("|")  # no pipe moved into math: the table holds


def test_images_become_captioned_figures():
    out = _render().figures("text\n\n![accuracy, 6 000 clients](a/b.png)\n```text\n![x](y.png)\n```")
    assert '<figure markdown="span">' in out
    assert "<figcaption>accuracy, 6 000 clients</figcaption>" in out
    assert "```text\n![x](y.png)\n```" in out  # an image in a code block stays code


def test_long_inline_code_breaks_only_after_dots_and_underscores():
    breakable = _render().breakable_code
    assert breakable("<td><code>algorithm.gossip_steps</code></td>") == \
        "<td><code>algorithm.<wbr>gossip_<wbr>steps</code></td>"
    assert breakable("<code>short_one</code>") == "<code>short_one</code>"
    block = '<pre><span></span><code>train.local_steps = 1</code></pre>'
    assert breakable(block) == block
    css = (ROOT / "docs/stylesheets/extra.css").read_text()
    assert "word-break: normal" in css and "position: sticky" in css


ARTICLE = r"<article\b.*?</article>"
HIDDEN = (r"<(pre|code|script|style)\b.*?</\1>|"
          r"<(span|div) class=\"arithmatex\">.*?</\2>")


def site_defects(site: Path) -> list[str]:
    """Literal ``**``, ``_{`` or ``^{`` in a page's text outside code and math, and images
    outside a figure with a caption, in the built ``site``."""
    import html
    import re

    found = []
    for page in sorted(site.rglob("*.html")):
        where = page.relative_to(site)
        for body in re.findall(ARTICLE, page.read_text(encoding="utf-8"), re.DOTALL):
            text = html.unescape(re.sub(r"<[^>]+>", "", re.sub(HIDDEN, "", body, flags=re.DOTALL)))
            for mark in ("**", "_{", "^{"):
                found += [f"{where}: literal {mark} in '{text[max(0, m.start() - 30):m.end() + 30]}'"
                          for m in re.finditer(re.escape(mark), text)]
            captioned = [m.span() for m in re.finditer(r"<figure\b.*?</figure>", body, re.DOTALL)
                         if re.search(r"<figcaption\b[^>]*>\s*[^<\s]", m.group())]
            found += [f"{where}: a figure without a caption: {m.group()}"
                      for m in re.finditer(r"<img\b[^>]*>", body)
                      if not any(a <= m.start() < b for a, b in captioned)]
    return found


def test_the_defect_finder_finds_each_kind(tmp_path):
    (tmp_path / "p.html").write_text(
        "<article><p>**bold** and m_{j} and x^{t}</p><code>a_{b}</code>"
        '<span class="arithmatex">\\(x^{t}\\)</span><p><img src="a.png"></p>'
        '<figure><img src="b.png"><figcaption>b</figcaption></figure></article>')
    found = site_defects(tmp_path)
    assert len(found) == 5 and "a.png" in found[-1], found  # ** twice, _{, ^{, the image


@pytest.mark.slow
@pytest.mark.docs
def test_the_built_site_renders_as_written(tmp_path):
    """`mkdocs build --strict` of the docs, then no literal ** (the hook escaping emphasis),
    no raw _{ or ^{ outside code and math, and every figure with a caption."""
    import os
    import subprocess

    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    site = tmp_path / "site"
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d",
                            str(site)], cwd=ROOT, env=env, capture_output=True, text=True,
                           check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    assert site_defects(site) == []
