"""MkDocs hook: the algorithm reference, generated from gossipfl's registry at build time.

For every class of ``gossipfl.algorithms.available_algorithms()`` it writes one page,
``algorithms/<name>.md``: name, kind (the family from the module path, and whether a server
is involved), the paper (the class's ``paper`` and the module docstring's opening paragraph,
which names authors, title and venue), every hyperparameter of its ``Params`` dataclass with
the default, the valid range (the ``words`` of its :class:`gossipfl.validation.Rule`) and the
field's own comment, then the module docstring: the update rule, with its indented equation
blocks rendered as display math, and the paragraphs that say which definition it follows
where the papers and the code differ. ``algorithms/index.md`` is the table of all of them.

Nothing here is written by hand, so the reference cannot drift from the code. The build
fails (mkdocs ``PluginError``) when an algorithm has no paper or no docstring.

On every page it also renders what Markdown would leave raw (tests/docs/test_docs_site.py builds
the site and checks it): inline notation with braces in prose (``m_{j→i}``) becomes inline
math, an image alone on its line a figure captioned with its alt text, and long inline code
may wrap after its dots and underscores only.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The checkout's own code, whatever gossipfl the environment has installed.
sys.path.insert(0, str(ROOT / "src"))

FAMILIES = ("decentralized", "centralized", "personalized")
# A prose paragraph that says which definition is followed, where papers and code differ.
DEFINITION = re.compile(r"\b(code|codes|proof|original|reading|readings|official|authors'?|"
                        r"prints|writes .* instead)\b", re.IGNORECASE)


# ---------------------------------------------------------------- collecting the registry


def _algorithms() -> dict[str, type]:
    from gossipfl.algorithms import available_algorithms

    return available_algorithms()


def _kind(cls) -> str:
    parts = cls.__module__.split(".")
    family = next((p for p in parts if p in FAMILIES), "other")
    if family == "personalized":
        return "personalized, " + ("centralized" if cls.centralized else "decentralized")
    return family


def _field_comments(params_cls) -> dict[str, str]:
    """``name: type = default  # comment`` lines of the dataclass and its bases."""
    comments: dict[str, str] = {}
    for klass in reversed(params_cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        for line in source.splitlines():
            match = re.match(r"\s+(\w+)\s*:[^=#]*(?:=[^#]*)?#\s*(.+)$", line)
            if match:
                comments[match.group(1)] = match.group(2).strip()
    return comments


def _rules(params_cls) -> dict[str, object]:
    rules: dict[str, object] = {}
    for klass in reversed(params_cls.__mro__):
        rules.update(vars(klass).get("rules", {}) or {})
    return rules


def _range(rule) -> str:
    if rule is None:
        return "any value of its type"
    if getattr(rule, "choices", ()):
        return "one of " + ", ".join(f"`{c}`" for c in rule.choices)
    return rule.words or "checked"


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = field.default_factory()  # type: ignore[misc]
    else:
        return "required"
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _type(field: dataclasses.Field) -> str:
    annotation = field.type if isinstance(field.type, str) else getattr(
        field.type, "__name__", str(field.type))
    return annotation.replace("|", "or")


def _params_table(cls) -> str:
    params_cls = cls.Params
    if not dataclasses.is_dataclass(params_cls):
        return "No hyperparameters of its own."
    fields = dataclasses.fields(params_cls)
    if not fields:
        return "No hyperparameters of its own."
    comments, rules = _field_comments(params_cls), _rules(params_cls)
    rows = ["| parameter | default | valid range | type | meaning |", "|---|---|---|---|---|"]
    for field in fields:
        meaning = _inline(comments.get(field.name, ""))
        rows.append(f"| `algorithm.{field.name}` | {_default(field)} | "
                    f"{_cell(_range(rules.get(field.name)))} | `{_type(field)}` | "
                    f"{_cell(meaning)} |")
    return "\n".join(rows)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


# ---------------------------------------------------------------- docstring → Markdown + math

GREEK = {
    "α": r"\alpha", "β": r"\beta", "γ": r"\gamma", "δ": r"\delta", "ε": r"\varepsilon",
    "η": r"\eta", "θ": r"\theta", "λ": r"\lambda", "μ": r"\mu", "ξ": r"\xi", "π": r"\pi",
    "ρ": r"\rho", "σ": r"\sigma", "τ": r"\tau", "φ": r"\varphi", "ω": r"\omega",
    "Δ": r"\Delta", "Σ": r"\sum", "Π": r"\prod", "Ω": r"\Omega",
}
SYMBOLS = {
    "∇": r"\nabla ", "‖": r"\|", "−": "-", "·": r"\cdot ", "←": r"\leftarrow ",
    "→": r"\to ", "∈": r"\in ", "⊙": r"\odot ", "⟨": r"\langle ", "⟩": r"\rangle ",
    "≥": r"\ge ", "≤": r"\le ", "≈": r"\approx ", "×": r"\times ", "…": r"\ldots ",
    "∞": r"\infty ", "⌈": r"\lceil ", "⌉": r"\rceil ", "⌊": r"\lfloor ", "⌋": r"\rfloor ",
    "⊤": r"\top ", "∂": r"\partial ", "≠": r"\ne ", "∝": r"\propto ", "∀": r"\forall ",
    "⁺": "^{+}", "⁻": "^{-}", "²": "^{2}", "³": "^{3}", "⁰": "^{0}", "¹": "^{1}",
    "₀": "_{0}", "₁": "_{1}", "₂": "_{2}", "ᵀ": "^{\\top}", "√": r"\surd ",
    "%": r"\%", "#": r"\#", "&": r"\&", "$": r"\$", "~": r"\sim ",
    "∖": r"\setminus ", "∩": r"\cap ", "∪": r"\cup ", "⟂": r"\perp ", "≡": r"\equiv ",
}
ACCENTS = {"\u0303": r"\tilde", "\u0302": r"\hat", "\u0304": r"\bar"}
OPERATORS = {"exp", "log", "cos", "sin", "min", "max", "mod", "arg", "sup", "inf", "lim"}
PROSE_WORD = re.compile(r"\b[A-Za-z][a-z]{3,}\b")


EMPHASIS = re.compile(r"(?<![\w*])(\*\*?)(?=[^\s*])(.+?)(?<=[^\s*])\1(?![\w*])")


def _inline(text: str) -> str:
    """Prose: Sphinx roles become code spans (``x`` already is one in Markdown); emphasis
    (``**bold**``, ``*italic*``) stays Markdown, every other ``*`` (a product, an optimum
    x*) is a literal star."""
    text = re.sub(r":(?:mod|class|func|meth|data|attr):`~?([^`]+)`", r"`\1`", text)
    kept: list[str] = []

    def keep(match: re.Match) -> str:
        kept.append(match.group(0))
        return f"\0{len(kept) - 1}\0"

    text = EMPHASIS.sub(keep, text).replace("*", r"\*")
    return re.sub("\0(\\d+)\0", lambda m: kept[int(m.group(1))], text)


def _tex_text(text: str) -> str:
    text = text.replace("``", "").replace("\\", "/")
    for ch in "{}%#&$_^":
        text = text.replace(ch, "\\" + ch)
    text = text.replace("~", r"\sim ")
    return r"\text{" + text + "}"


def _tex_math(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if segment.startswith("``", i):
            end = segment.find("``", i + 2)
            end = len(segment) if end < 0 else end
            code = segment[i + 2:end].replace("_", r"\_")
            out.append(r"\texttt{" + code + "}")
            i = end + 2
            continue
        if segment.startswith("..", i) and not segment.startswith("...", i):
            out.append(r"\ldots ")
            i += 2
            continue
        word = re.match(r"[A-Za-z]{2,}", segment[i:])
        if word and (i == 0 or not segment[i - 1].isalpha()):
            w = word.group(0)
            if w.lower() in OPERATORS:
                out.append(rf"\operatorname{{{w}}}")
            elif len(w) >= 4:
                out.append(r"\text{ " + w + " }")
            else:
                out.append(rf"\mathrm{{{w}}}")
            i += len(w)
            continue
        if i + 1 < len(segment) and segment[i + 1] in ACCENTS:
            base = GREEK.get(ch, ch)
            out.append(ACCENTS[segment[i + 1]] + "{" + base + "}")
            i += 2
            continue
        if ch in GREEK:
            out.append(GREEK[ch] + " ")
        elif ch in SYMBOLS:
            out.append(SYMBOLS[ch])
        elif ch == "_" and re.match(r"_[A-Za-z0-9]{2,}\b", segment[i:]):
            sub = re.match(r"_([A-Za-z0-9]{2,})", segment[i:]).group(1)
            out.append("_{" + sub + "}")
            i += 1 + len(sub)
            continue
        elif ch == "\\":
            out.append(r"\backslash ")
        elif ord(ch) > 127 and not ch.isalpha():
            out.append(r"\text{" + ch + "}")
        else:
            out.append(ch)
        i += 1
    return "".join(out)


TEXT_TOKEN = re.compile(r"[(\"']*[A-Za-z][A-Za-z'.\-]*[A-Za-z)\"',.;:]*")


def _is_text(token: str) -> bool:
    """A word of prose (two letters or more, no math marks), not a symbol or an index."""
    letters = re.sub(r"[^A-Za-z]", "", token)
    return (bool(TEXT_TOKEN.fullmatch(token)) and len(letters) >= 2
            and letters.lower() not in OPERATORS and letters not in ("wd", "nnz"))


def _tex_segment(segment: str) -> str:
    """Runs of prose words become \\text{...}; runs of everything else become math."""
    runs: list[tuple[bool, list[str]]] = []
    for token in segment.split():
        text = _is_text(token) and "``" not in token
        if runs and runs[-1][0] == text:
            runs[-1][1].append(token)
        else:
            runs.append((text, [token]))
    if sum(len(t) for is_text, t in runs if is_text) < 2:  # a lone word: keep it math
        return _tex_math(segment)
    return " ".join(_tex_text(" " + " ".join(t) + " ") if is_text else _tex_math(" ".join(t))
                    for is_text, t in runs)


def _tex_line(line: str, base_indent: int) -> str:
    indent = len(line) - len(line.lstrip(" "))
    pad = r"\quad " * max(0, (indent - base_indent) // 4)
    parts = [p for p in re.split(r" {3,}", line.strip()) if p]
    tex = ""
    for n, part in enumerate(parts):
        # a wide gap before "=" is alignment in the docstring; before anything else, a comment
        glue = "" if n == 0 else (" " if part[0] in "=←+−-" else r" \qquad ")
        tex += glue + _tex_segment(part)
    return "& " + pad + tex


def _math_block(lines: list[str]) -> str:
    base = min(len(l) - len(l.lstrip(" ")) for l in lines if l.strip())
    body = (r" \\" + "\n").join(_tex_line(l, base) for l in lines if l.strip())
    return "\\[\n\\begin{aligned}\n" + body + "\n\\end{aligned}\n\\]"


def _blocks(doc: str) -> list[tuple[str, str]]:
    """The docstring as ('prose' | 'math', text) blocks: a math block is a run of lines
    indented deeper than the prose around it."""
    doc = inspect.cleandoc(doc)
    blocks: list[tuple[str, list[str]]] = []
    for line in doc.splitlines():
        kind = "math" if line.startswith("    ") else ("blank" if not line.strip() else "prose")
        if kind == "blank":
            blocks.append(("blank", []))
            continue
        if blocks and blocks[-1][0] == kind:
            blocks[-1][1].append(line)
        else:
            blocks.append((kind, [line]))
    out: list[tuple[str, str]] = []
    for kind, lines in blocks:
        if kind == "prose":
            out.append(("prose", _inline(" ".join(l.strip() for l in lines))))
        elif kind == "math":
            out.append(("math", _math_block(lines)))
    return out


def _sections(doc: str) -> tuple[str, list[str], list[str]]:
    """(citation paragraph, update-rule blocks, definition blocks). A prose paragraph and the
    math blocks after it stay together."""
    groups: list[list[tuple[str, str]]] = []
    for kind, text in _blocks(doc):
        if kind == "prose" or not groups:
            groups.append([(kind, text)])
        else:
            groups[-1].append((kind, text))
    citation = groups[0][0][1] if groups and groups[0][0][0] == "prose" else ""
    rule: list[str] = [t for k, t in groups[0][1:]] if groups else []
    definition: list[str] = []
    for group in groups[1:]:
        texts = [t for _, t in group]
        has_math = any(k == "math" for k, _ in group)
        lead = group[0][1] if group[0][0] == "prose" else ""
        (definition if DEFINITION.search(lead) and not has_math else rule).extend(texts)
    return citation, rule, definition


# ---------------------------------------------------------------- inline notation in prose

# What prose leaves alone: code spans, math already marked, links' targets, HTML tags.
PROTECTED = re.compile(r"`+[^`]*`+|\\\(.*?\\\)|\$[^$]+\$|\]\([^)]*\)|<[^>]+>")
PROSE = re.compile(r"[A-Za-z][a-z]{2,}[,.;:!?)'\"]*|[A-Z][A-Za-z]{2,}[,.;:!?)'\"]*")
OPENS, CLOSES = "([{", ")]}"
SCRIPTED = re.compile(r"[^A-Za-z_^\s]*[A-Za-z]?[\u0300-\u036f]?[_^]")  # x_i, x̄_H, Σ_kept, ‖θ^t
SHORT_WORDS = {"a", "an", "as", "at", "be", "by", "do", "he", "if", "in", "is", "it", "no",
               "of", "on", "or", "so", "to", "up", "we", "vs", "e.g", "i.e"}


def _mathy(token: str) -> bool:
    """A token of inline notation: a sub- or superscript, an operator or a symbol, a letter
    or a number; not a word of prose, Markdown (``|``, ``-`` bullets) or a placeholder."""
    if "\0" in token or token in ("|", "-", "*", ">", "#"):
        return False
    if "_{" in token or "^{" in token or SCRIPTED.match(token):
        return True
    if token.endswith((":", ";")):  # the end of a clause
        return False
    bare = token.strip("([{)]},.;:")
    if bare.lower() in OPERATORS:
        return True
    if bare.lower() in SHORT_WORDS:
        return False
    return bool(bare) and not PROSE.fullmatch(token) and not re.search(r"[A-Za-z]{3,}", bare)


def _balanced(text: str) -> bool:
    """Whether every bracket of ``text`` closes, in order."""
    stack: list[str] = []
    for ch in text:
        if ch in OPENS:
            stack.append(CLOSES[OPENS.index(ch)])
        elif ch in CLOSES and (not stack or stack.pop() != ch):
            return False
    return not stack


def _as_math(run: str) -> str:
    """``run`` as inline math, its unmatched brackets and trailing punctuation left outside;
    unchanged when its braces do not balance."""
    head = tail = ""
    whole = run
    while re.search(r" [-−+=/·×]$", run):  # an operator with nothing after it
        run, tail = run[:-2], run[-2:] + tail
    while run and run[-1] in ",.;:" or (run.endswith(")") and run.count(")") > run.count("(")):
        run, tail = run[:-1], run[-1] + tail
    while run.startswith("(") and run.count("(") > run.count(")"):
        run, head = run[1:], head + "("
    if not ("_{" in run or "^{" in run):
        return head + run + tail
    if not _balanced(run):
        return _balanced_windows(whole)
    return head + r"\(" + _tex_math(run) + r"\)" + tail


def _balanced_windows(run: str) -> str:
    """An unbalanced run (a bracket opened before it or closed after it): from the left, the
    longest balanced windows of its words that hold a ``_{`` or ``^{``, as math."""
    words, out, i = run.split(" "), [], 0
    while i < len(words):
        for j in range(len(words), i, -1):
            window = " ".join(words[i:j])
            opened = "(" if window.startswith("(") and not _balanced(window.rstrip(",.;:")) \
                else ""  # a bracket closed after the run
            core = window[len(opened):]
            if ("_{" in core or "^{" in core) and _balanced(core.rstrip(",.;:")):
                out.append(opened + _as_math(core))
                i = j
                break
        else:
            out.append(words[i])
            i += 1
    return " ".join(out)


def _inline_math_line(line: str) -> str:
    r"""Inline notation written with braces (``m_{j→i}``, ``Σ_{j∈H_i} w_ij (z_j − z_i)``)
    in a line of prose, as inline math (MathJax, through pymdownx.arithmatex): each run of
    notation tokens that holds a ``_{`` or ``^{`` becomes ``\(...\)``."""
    kept: list[str] = []

    def keep(match: re.Match) -> str:
        kept.append(match.group(0))
        return f"\0{len(kept) - 1}\0"

    text = PROTECTED.sub(keep, line)
    if "_{" not in text and "^{" not in text:
        return line
    tokens = re.split(r"( +)", text)
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        spaces: list[str] = []
        while run and not run[-1].strip():  # the spaces after the run stay outside it
            spaces.insert(0, run.pop())
        text = "".join(run)
        table = line.lstrip().startswith("|") and "|" in text  # a pipe would split the cell
        out.append(text if table else _as_math(text) if text else "")
        out.extend(spaces)
        run.clear()

    for token in tokens:
        if not token.strip():
            (run if run else out).append(token)
        elif _mathy(token):
            run.append(token)
        else:
            flush()
            out.append(token)
    flush()
    return re.sub("\0(\\d+)\0", lambda m: kept[int(m.group(1))], "".join(out))


def _prose(markdown: str):
    """Each line of ``markdown`` with whether it is prose (not in a fenced or indented code
    block, nor display math, nor HTML)."""
    fence, display, previous_blank = None, False, True
    for line in markdown.split("\n"):
        stripped = line.lstrip()
        prose = False
        if fence is None and re.match(r"(```|~~~)", stripped):
            fence = stripped[:3]
        elif fence is not None:
            if stripped.startswith(fence):
                fence = None
        elif stripped.startswith(r"\[") or display:
            display = not stripped.rstrip().endswith(r"\]")
        else:
            prose = not (line.startswith("    ") and previous_blank) and \
                not stripped.startswith("<")
        yield line, prose
        previous_blank = not line.strip() or (line.startswith("    ") and previous_blank)


def inline_math(markdown: str) -> str:
    """:func:`_inline_math_line` on every line of prose."""
    return "\n".join(_inline_math_line(line) if prose else line
                     for line, prose in _prose(markdown))


IMAGE = re.compile(r"\s*!\[([^\]]+)\]\(([^)\s]+)\)\s*")


def figures(markdown: str) -> str:
    """Every image alone on its line becomes a figure whose caption is its alt text (so a
    reader sees what each figure shows, e.g. which of two scales)."""
    out = []
    for line, prose in _prose(markdown):
        match = IMAGE.fullmatch(line) if prose else None
        if match:
            indent = line[:len(line) - len(line.lstrip())]
            line = (f"\n{indent}<figure markdown=\"span\">\n{indent}  {line.strip()}\n"
                    f"{indent}  <figcaption>{match.group(1)}</figcaption>\n{indent}</figure>\n")
        out.append(line)
    return "\n".join(out)


# ---------------------------------------------------------------- pages


def _page(name: str, cls) -> str:
    from mkdocs.exceptions import PluginError

    module = sys.modules[cls.__module__]
    if not (cls.paper or "").strip():
        raise PluginError(f"algorithm {name!r} ({cls.__module__}.{cls.__qualname__}) has no "
                          f"paper: set its class attribute paper = \"Authors year, Title\".")
    if not (module.__doc__ or "").strip():
        raise PluginError(f"algorithm {name!r} has no module docstring in {cls.__module__}: "
                          f"write the paper's citation and update rule there.")
    citation, rule, definition = _sections(module.__doc__)
    own = cls.__dict__.get("__doc__")
    lines = [
        f"# `{name}`", "",
        "| algorithm | |", "|---|---|",
        f"| name | `algorithm.name: {name}` |",
        f"| kind | {_kind(cls)} |",
        f"| paper | {_cell(_inline(cls.paper))} |",
        f"| class | `{cls.__module__}.{cls.__qualname__}` |",
        f"| gossip orders | {', '.join(f'`{o}`' for o in cls.orders)} |", "",
        "## Citation", "", citation, "",
        "## Parameters", "",
        ("Set under `algorithm:` in a config, or `--set algorithm.<parameter>=<value>`. "
         "The training settings (`train.lr` η, `train.local_epochs` / `local_steps` K, "
         "`train.weight_decay` wd) are shared by every algorithm."), "",
        _params_table(cls), "",
        "## Update rule", "",
    ]
    for text in rule:
        lines += [text, ""]
    if own and own.strip() and own is not getattr(cls.__mro__[1], "__doc__", None):
        lines += [_inline(inspect.cleandoc(own)), ""]
    if definition:
        lines += ["## Which definition it follows", ""]
        for text in definition:
            lines += [text, ""]
    lines += ["---", "",
              (f"*Generated from `{cls.__module__}` by `docs/hooks/algorithms.py`: edit the "
               "module's docstring, `paper` or `Params` to change this page.*"), ""]
    return "\n".join(lines)


def _index(algorithms: dict[str, type]) -> str:
    lines = [
        "# Algorithms", "",
        ("Every algorithm registered in gossipfl, generated from the registry "
         "(`gossipfl.algorithms.available_algorithms()`) when the site is built. "
         "`gossipfl list` prints the same set. Each page gives the paper, the update rule "
         "as the module's docstring writes it, every parameter with its default and valid "
         "range, and which definition it follows where the papers and the code differ."), "",
        ("Every update rule is tested against its paper's equations: least squares with "
         "full-batch gradients, several clients and rounds, compared with an independent "
         "float64 NumPy re-derivation ([notes](notes.md))."), "",
        "| name | kind | paper | parameters (default) |", "|---|---|---|---|",
    ]
    for name, cls in algorithms.items():
        params = "—"
        if dataclasses.is_dataclass(cls.Params) and dataclasses.fields(cls.Params):
            params = ", ".join(f"`{f.name}` ({_default(f).strip('`')})"
                               for f in dataclasses.fields(cls.Params))
        lines.append(f"| [`{name}`]({name}.md) | {_kind(cls)} | {_cell(_inline(cls.paper))} "
                     f"| {_cell(params)} |")
    lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------- mkdocs events


def on_config(config, **kwargs):
    """Put one navigation entry per algorithm under "Algorithms"."""
    algorithms = _algorithms()
    entries = [{"Overview": "algorithms/index.md"}, {"Notes": "algorithms/notes.md"}]
    entries += [{name: f"algorithms/{name}.md"} for name in algorithms]
    nav = config.get("nav") or []
    for i, item in enumerate(nav):
        if isinstance(item, dict) and "Algorithms" in item:
            nav[i] = {"Algorithms": entries}
    return config


def on_files(files, config, **kwargs):
    from mkdocs.structure.files import File

    algorithms = _algorithms()
    files.append(File.generated(config, "algorithms/index.md", content=_index(algorithms)))
    for name, cls in algorithms.items():
        files.append(File.generated(config, f"algorithms/{name}.md", content=_page(name, cls)))
    return files


def on_page_markdown(markdown, page, config, files, **kwargs):
    """Every page: inline notation in prose rendered as math (:func:`inline_math`), images
    as captioned figures (:func:`figures`)."""
    return figures(inline_math(markdown))


INLINE_CODE = re.compile(r"(?<!<pre>)(?<!</span>)<code>([^<]{13,})</code>")


def breakable_code(html: str) -> str:
    """Long inline code (``algorithm.gossip_steps``) may wrap after its dots and underscores
    (``<wbr>``), and only there (docs/stylesheets/extra.css: no break inside a word)."""
    return INLINE_CODE.sub(
        lambda m: "<code>" + re.sub(r"([._/])(?=[^._/])", r"\1<wbr>", m.group(1)) + "</code>",
        html)


def on_page_content(html, page, config, files, **kwargs):
    return breakable_code(html)
