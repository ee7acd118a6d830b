"""Every code block of the docs runs: README.md and docs/**/*.md (whatever files exist).

Each fenced block is one test, named ``<file>:<line>``, run in a fresh folder that looks like
a checkout (the repository's files linked in; ``examples/`` a real folder of links, so that
files written there stay in the temporary folder). What a block's fence says decides what
happens to it:

``sh`` / ``bash``
    Each command (``\\`` continuations joined, ``# comments`` dropped) runs: ``gossipfl ...``
    and ``.venv/bin/gossipfl ...`` through ``gossipfl.cli.main`` in this process (status 0
    expected), ``python ...`` / ``.venv/bin/python ...`` as a subprocess of this Python with
    ``src`` on ``PYTHONPATH``. Any other program (``make``, ``torchrun``) needs ``check``.
``python``
    Executed with ``exec`` in the folder, as a script.
``yaml``
    A config (no ``grid``/``base``/``seeds`` key) is written to ``examples/`` and run with
    ``gossipfl run``; a study is loaded with ``gossipfl.studies.sweep.load_study``, which validates
    every grid point (and run with ``gossipfl sweep`` when marked ``run``).
``text`` (or ``console``, ``csv``, ``json``, ...)
    Output, listings, diagrams: not run. A fence without a language is an error (say
    ``text`` for output), so that a command cannot hide in an unlabelled block.

**Shortening.** Runs are shortened by a documented mechanism, never skipped: every
``gossipfl run``, ``sweep`` and ``stability`` command (and every call of the Python verbs that
train, ``gossipfl.run``, ``sweep`` and ``stability``, in a python block) gets ``SHORTEN``
(``--set train.rounds=1``) appended, after the block's own overrides, unless the block is
marked ``full`` (a resume takes no ``--set`` and is left alone).

**Tiers.** Every block is parsed in the fast tier (``test_docs_block_parses``: commands
through their argument parsers, python compiled with its imports run, configs and studies
validated); a block runs in ``test_docs_block_runs`` (marker ``docs``), which is also
``slow`` when the block trains (a ``gossipfl run``/``sweep``/``stability``/``analyze``
command, a config, a run-dir, or python calling a verb that trains).

**Markers.** An HTML comment on the last non-blank line before a fence (invisible when the
Markdown is rendered) changes what happens to that block; clauses are separated by ``;``::

    <!-- docs-test: check -->            commands are parsed, not run: gossipfl's and the
                                         benchmarks' own argument parsers check every option
                                         (python -m MODULE: the module's argparse), `make X`
                                         is `make -n X`, torchrun's `-m gossipfl ...` is parsed
                                         (for hours of compute, GPUs, several nodes,
                                         placeholders such as RUN_DIR); in a python block:
                                         compiled, and its imports executed
    <!-- docs-test: --set data.clients=4 -->   more arguments for every gossipfl run /
                                         sweep / stability command (overrides for
                                         gossipfl.run in python), before SHORTEN
    <!-- docs-test: full -->             no SHORTEN (the block is already short)
    <!-- docs-test: run -->              a study in a yaml block is also run
    <!-- docs-test: run-dir PATH -->      before the block, a short quickstart run is made at
                                         PATH (4 clients, 1 round, a 784-16-10
                                         MLP), for blocks that analyze
                                         or report an existing run directory
    <!-- docs-test: patch MODULE.FUNCTION key=value ... -->   in a python block, calls of
                                         that function get these keyword arguments (values
                                         read as YAML), e.g. fewer samples or iterations
    <!-- docs-test: excerpt FILE... -->  a python block that quotes code from FILEs (paths
                                         from the repository root): every class, function and
                                         registered name it defines must be defined there

docs/guide/writing-docs.md says the same for people writing the docs.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import re
import runpy
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SHORTEN = ["--set", "train.rounds=1"]
RUNS = ("run", "sweep", "stability")  # gossipfl commands that train (shortened)
LANGUAGES = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python", "py": "python",
             "yaml": "yaml", "yml": "yaml"}
NOT_RUN = {"text", "console", "csv", "json", "markdown", "md", "diff", "ini", "toml"}
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*docs-test:(.*?)-->\s*$")
QUICK_RUN = ["--set", "train.rounds=1", "--set", "data.clients=4", "--set", "eval.every=1",
             "--set", "model.options.hidden=[16]", "--quiet"]


@dataclass
class Block:
    file: str  # relative to the repository root
    line: int  # of the opening fence
    language: str  # as written after the fence
    code: str
    marker: str = ""
    directives: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def doc_files() -> list[Path]:
    files = [ROOT / "README.md"] if (ROOT / "README.md").is_file() else []
    return files + sorted(p for p in (ROOT / "docs").rglob("*.md") if p.is_file())


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, language = match.groups()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence[:3]):
            end += 1
        body = [line.removeprefix(indent)
                for line in lines[i + 1:end]]
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before)
        block = Block(str(path.relative_to(ROOT)), i + 1, language.lower(),
                      "\n".join(body) + "\n", marker.group(1).strip() if marker else "")
        block.directives = parse_marker(block.marker)
        out.append(block)
        i = end + 1
    return out


def parse_marker(text: str) -> dict:
    """``check; --set a=b; excerpt F G; run-dir P; full; run`` → a dict of directives."""
    directives: dict = {"args": []}
    for clause in filter(None, (c.strip() for c in text.split(";"))):
        words = shlex.split(clause)
        if words[0].startswith("--"):
            directives["args"] += words
        elif words[0] in ("check", "full", "run") and len(words) == 1:
            directives[words[0]] = True
        elif words[0] in ("excerpt", "run-dir") and len(words) > 1:
            directives[words[0]] = words[1:]
        elif words[0] == "patch" and len(words) > 2 and all("=" in w for w in words[2:]):
            directives.setdefault("patch", []).append(
                (words[1], {k: yaml.safe_load(v) for k, v in (w.split("=", 1)
                                                              for w in words[2:])}))
        else:
            raise ValueError(f"unknown docs-test clause {clause!r}")
    return directives


ALL_BLOCKS = [block for path in doc_files() for block in blocks_of(path)]


def test_the_docs_have_blocks_and_every_fence_names_its_language():
    assert any(b.file == "README.md" for b in ALL_BLOCKS)
    unlabelled = [b.id for b in ALL_BLOCKS if not b.language]
    assert not unlabelled, (f"label these fences (```text for output, ```sh for commands): "
                            f"{unlabelled}")
    unknown = [f"{b.id} ({b.language})" for b in ALL_BLOCKS
               if b.language and b.language not in LANGUAGES and b.language not in NOT_RUN]
    assert not unknown, f"fence languages this test does not know: {unknown}"


# --------------------------------------------------------------------------------------------
# The folder a block runs in
# --------------------------------------------------------------------------------------------
@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """A folder that looks like the repository (its files linked in), as the cwd."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name in (".git", ".venv", "runs", "examples") or entry.name.startswith(".pytest"):
            continue
        (work / entry.name).symlink_to(entry)
    (work / "examples").mkdir()
    for entry in (ROOT / "examples").iterdir():
        (work / "examples" / entry.name).symlink_to(entry)
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(ROOT))  # python -m benchmarks.X in check mode
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return work


def gossipfl_main(argv: list[str], where: str) -> None:
    from gossipfl.cli import main

    status = main(argv)
    assert status == 0, f"{where}: `gossipfl {shlex.join(argv)}` exited with {status}"


def commands(code: str) -> list[list[str]]:
    """The block's commands as argument lists (continuations joined, comments dropped)."""
    joined = re.sub(r"\\\n", " ", code)
    out = []
    for line in joined.splitlines():
        words = shlex.split(line, comments=True)
        if words:
            out.append(words)
    return out


def shortened(argv: list[str], block: Block) -> list[str]:
    """argv with the block's arguments and SHORTEN appended to a command that trains."""
    if not argv or argv[0] not in RUNS or "--resume" in argv:
        return argv
    return [*argv, *block.directives["args"], *([] if block.directives.get("full") else SHORTEN)]


def program(words: list[str]) -> tuple[str, list[str]]:
    """('gossipfl' | 'python' | other, the arguments)."""
    head = Path(words[0]).name
    if head == "gossipfl":
        return "gossipfl", words[1:]
    if head in ("python", "python3"):
        if words[1:3] == ["-m", "gossipfl"]:
            return "gossipfl", words[3:]
        return "python", words[1:]
    return head, words[1:]


class _Parsed(Exception):
    """Raised by a patched ArgumentParser.parse_args once the arguments parsed."""


def parse_only(module: str, args: list[str], monkeypatch) -> None:
    """``python -m module args`` up to its argument parser: every option checked, nothing
    run. A module without an argument parser fails (it would have run)."""
    original = argparse.ArgumentParser.parse_args

    def parse_args(self, args=None, namespace=None):
        original(self, args, namespace)
        raise _Parsed

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", parse_args)
        patch.setattr(sys, "argv", [module, *args])
        with pytest.raises(_Parsed):
            runpy.run_module(module, run_name="__main__", alter_sys=True)


PIP_PARSE = """
import sys
try:
    from pip._internal.commands import commands_dict, create_command
except ImportError:
    sys.exit(4)
args = sys.argv[1:]
if not args or args[0] not in commands_dict:
    sys.exit(3)
create_command(args[0]).parse_args(args[1:])
"""


def check_pip(args: list[str], where: str) -> None:
    """A pip command through pip's own option parser (nothing is installed).

    The parser runs in a child process: even looking pip up switches setuptools' distutils shim off
    for the rest of the process, after which inductor's C++ build (a compiled test in the same
    worker) fails on the standard library's distutils.
    """
    done = subprocess.run(
        [sys.executable, "-c", PIP_PARSE, *args], capture_output=True, text=True, check=False
    )
    if done.returncode == 4:
        pytest.skip("pip is not installed")
    assert done.returncode != 3, f"{where}: `pip {shlex.join(args)}`: no command"
    assert done.returncode == 0, (
        f"{where}: `pip {shlex.join(args)}` does not parse (status {done.returncode}): "
        f"{done.stderr.strip()}"
    )


def check_command(words: list[str], where: str, monkeypatch) -> None:
    name, args = program(words)
    if name == "gossipfl":
        from gossipfl.cli import build_parser

        try:
            build_parser().parse_args(args)
        except SystemExit as exc:
            pytest.fail(f"{where}: `{shlex.join(words)}` does not parse (status {exc.code})")
    elif name == "pip" or (name == "python" and args[:2] == ["-m", "pip"]):
        check_pip(args[2:] if name == "python" else args, where)
    elif name == "python" and args[:1] == ["-m"]:
        parse_only(args[1], args[2:], monkeypatch)
    elif name == "make":
        done = subprocess.run(["make", "-n", *args], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{where}: `make -n {shlex.join(args)}`: {done.stderr}"
    elif name == "torchrun":
        assert "-m" in args and args[args.index("-m") + 1] == "gossipfl", where
        check_command(["gossipfl", *args[args.index("-m") + 2:]], where, monkeypatch)
    else:
        pytest.fail(f"{where}: cannot check the program {name!r}")


def run_command(words: list[str], block: Block) -> None:
    name, args = program(words)
    if name == "gossipfl":
        gossipfl_main(shortened(args, block), block.id)
    elif name == "python":
        done = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                              timeout=600, check=False)
        assert done.returncode == 0, (f"{block.id}: `{shlex.join(words)}` exited with "
                                      f"{done.returncode}:\n{done.stdout[-3000:]}\n"
                                      f"{done.stderr[-3000:]}")
    else:
        pytest.fail(f"{block.id}: `{words[0]}` can only be checked; put <!-- docs-test: check "
                    f"--> before the block")


# --------------------------------------------------------------------------------------------
# The blocks
# --------------------------------------------------------------------------------------------
def names_defined(code: str) -> set[str]:
    """Classes, functions and registered names a quoted block defines."""
    names = set(re.findall(r"^\s*(?:class|def)\s+(\w+)", code, flags=re.MULTILINE))
    names |= {f'"{n}"' for n in re.findall(r'@register\w*\(\s*"(\w+)"', code)}
    names |= {f'"{n}"' for n in re.findall(r'^\s*name\s*=\s*"(\w+)"', code, flags=re.MULTILINE)}
    return names


def names_in(files: list[str]) -> set[str]:
    names: set[str] = set()
    for file in files:
        text = (ROOT / file).read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(f'"{node.value}"')
    return names


def run_python(block: Block, monkeypatch, parse: bool = False) -> None:
    import gossipfl
    import gossipfl.api

    if block.directives.get("excerpt"):
        missing = names_defined(block.code) - names_in(block.directives["excerpt"])
        assert names_defined(block.code), f"{block.id}: an excerpt that defines nothing"
        assert not missing, (f"{block.id}: quotes {sorted(missing)}, which "
                             f"{block.directives['excerpt']} do not define")
        return
    code = compile(block.code, block.id, "exec")
    if parse or block.directives.get("check"):
        imports = [node for node in ast.parse(block.code).body
                   if isinstance(node, ast.Import | ast.ImportFrom)]
        exec(compile(ast.Module(imports, []), block.id, "exec"),  # noqa: S102 - the docs' own
             {"__name__": "__docs__"})
        return
    args = block.directives["args"]
    overrides = [value for flag, value in zip(args[::2], args[1::2], strict=False)
                 if flag == "--set"]
    if not block.directives.get("full"):
        overrides += SHORTEN[1::2]
    for verb in TRAINING_VERBS:
        shortened_verb = with_overrides(getattr(gossipfl.api, verb), overrides)
        monkeypatch.setattr(gossipfl, verb, shortened_verb, raising=False)
        monkeypatch.setattr(gossipfl.api, verb, shortened_verb)
    for target, forced in block.directives.get("patch", []):
        module_name, name = target.rsplit(".", 1)
        module = importlib.import_module(module_name)
        monkeypatch.setattr(module, name, forcing(getattr(module, name), forced))
    exec(code, {"__name__": "__docs__"})  # noqa: S102 - the docs' own code


#: The Python API's verbs that train (each takes ``overrides=``): every call is shortened.
TRAINING_VERBS = ("run", "sweep", "stability")


def with_overrides(function, overrides: list[str]):
    """``function`` with ``overrides`` appended to its ``overrides=`` argument."""
    def call(*args, **kwargs):
        kwargs["overrides"] = [*kwargs.get("overrides", ()), *overrides]
        return function(*args, **kwargs)
    return call


def forcing(function, forced: dict):
    """``function`` called with the keyword arguments ``forced`` (the block's ``patch``)."""
    def call(*args, **kwargs):
        return function(*args, **{**kwargs, **forced})
    return call


def run_yaml(block: Block, checkout: Path) -> None:
    data = yaml.safe_load(block.code)
    path = checkout / "examples" / f"docs_{Path(block.file).stem}_{block.line}.yaml"
    path.write_text(block.code, encoding="utf-8")
    rel = str(path.relative_to(checkout))
    study = isinstance(data, dict) and any(k in data for k in ("grid", "base", "seeds"))
    if not study:
        run_command(["gossipfl", "run", rel, "--quiet"], block)
        return
    from gossipfl.studies.sweep import load_study

    load_study(path, block.directives["args"][1::2])
    if block.directives.get("run"):
        run_command(["gossipfl", "sweep", rel, "--quiet"], block)


RUNNABLE = [b for b in ALL_BLOCKS if LANGUAGES.get(b.language)]
#: The Python calls and commands that train (or analyze a trained model).
TRAINING_CALL = re.compile(r"\b(run|sweep|stability|analyze|Runner)\(")


def trains(block: Block) -> bool:
    """Whether running ``block`` trains a model (the slow tier) rather than only parsing,
    listing or validating."""
    kind = LANGUAGES[block.language]
    if block.directives.get("check"):
        return False
    if block.directives.get("run-dir"):
        return True
    if kind == "python":
        return bool(block.directives.get("excerpt") is None and TRAINING_CALL.search(block.code))
    if kind == "yaml":
        data = yaml.safe_load(block.code)
        study = isinstance(data, dict) and any(k in data for k in ("grid", "base", "seeds"))
        return not study or bool(block.directives.get("run"))
    return any(program(words)[0] == "python"
               or (program(words)[0] == "gossipfl" and program(words)[1][:1] in
                   [[verb] for verb in (*RUNS, "analyze")])
               for words in commands(block.code))


def parse_block(block: Block, checkout: Path, monkeypatch) -> None:
    """What the fast tier does with every block: commands through their argument parsers,
    python compiled with its imports run (excerpts checked), configs loaded and validated,
    studies loaded (every grid point validated)."""
    kind = LANGUAGES[block.language]
    if kind == "python":
        run_python(block, monkeypatch, parse=True)
    elif kind == "yaml":
        data = yaml.safe_load(block.code)
        study = isinstance(data, dict) and any(k in data for k in ("grid", "base", "seeds"))
        path = checkout / "examples" / f"docs_{Path(block.file).stem}_{block.line}.yaml"
        path.write_text(block.code, encoding="utf-8")
        from gossipfl.assembly.loading import load_config
        from gossipfl.studies.sweep import load_study

        (load_study if study else load_config)(path, block.directives["args"][1::2])
    else:
        for words in commands(block.code):
            name, args = program(words)
            if name == "python" and args[:1] != ["-m"]:
                script = Path(args[0])  # compiled; one an earlier command writes is not there
                if script.is_file():
                    compile(script.read_text(encoding="utf-8"), str(script), "exec")
            elif name == "python" and not args[1].startswith(("benchmarks", "gossipfl", "pip")):
                # pip is parsed in a child process (check_pip): never looked up here
                assert importlib.util.find_spec(args[1]), f"{block.id}: no module {args[1]}"
            else:
                check_command(words, block.id, monkeypatch)


# a reference block lists every key of a section (topologies.md's topology: k, p, s, path
# beside one name), which the config warns it does not read: expected there
@pytest.mark.filterwarnings("ignore::gossipfl.errors.IgnoredSetting")
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_docs_block_parses(block, checkout, monkeypatch):
    parse_block(block, checkout, monkeypatch)


RUN_PARAMS = [pytest.param(b, id=b.id, marks=[pytest.mark.docs]
                           + ([pytest.mark.slow, pytest.mark.data] if trains(b) else []))
              for b in RUNNABLE if not b.directives.get("check")]


@pytest.mark.parametrize("block", RUN_PARAMS)
def test_docs_block_runs(block, checkout, monkeypatch):
    if block.directives.get("run-dir"):
        (path,) = block.directives["run-dir"]
        gossipfl_main(["run", "--out", str(Path(path).parent), "--name", Path(path).name,
                       *QUICK_RUN], f"{block.id} (run-dir)")
    kind = LANGUAGES[block.language]
    if kind == "python":
        run_python(block, monkeypatch)
    elif kind == "yaml":
        run_yaml(block, checkout)
    else:
        for words in commands(block.code):
            run_command(words, block)


def test_the_mechanism_catches_rot(tmp_path, checkout, monkeypatch):
    """A marker is parsed, check mode refuses an option that no longer exists (gossipfl's and
    a benchmark's parser), and an excerpt naming what its file lacks fails."""
    doc = tmp_path / "doc.md"
    doc.write_text("text\n\n<!-- docs-test: check; --set data.clients=4; patch m.f k=1 -->\n"
                   "```sh\ngossipfl run --sett x=1\n```\n", encoding="utf-8")
    lines = doc.read_text().splitlines()
    assert MARKER.match(lines[2]) and FENCE.match(lines[3])
    block = Block("doc.md", 4, "sh", "gossipfl run --sett x=1\n",
                  directives=parse_marker(MARKER.match(lines[2]).group(1)))
    assert block.directives == {"args": ["--set", "data.clients=4"], "check": True,
                                "patch": [("m.f", {"k": 1})]}
    with pytest.raises(pytest.fail.Exception, match="does not parse"):
        check_command(commands(block.code)[0], block.id, monkeypatch)
    with pytest.raises(SystemExit):
        parse_only("benchmarks.gossip", ["--no-such-option"], monkeypatch)
    assert shortened(["run", "x.yaml"], block) == ["run", "x.yaml", "--set", "data.clients=4",
                                                   *SHORTEN]
    assert names_defined('@register_model("mlp_tanh")\ndef mlp_tanh(): ...\n') <= \
        names_in(["examples/plugins/my_plugin.py"])
    assert names_defined("def gone(): ...\n") - names_in(["examples/plugins/my_plugin.py"])


def test_checking_a_pip_command_leaves_setuptools_distutils_shim_on():
    """Looking pip up in the test process would switch the shim off for the worker, and a
    compiled CPU test later in it would fail in inductor's C++ build (a CI failure seen)."""
    shim = pytest.importorskip("_distutils_hack")
    check_command(["python", "-m", "pip", "install", "--no-deps", "."], "here", None)
    check_command(["pip", "install", "torch"], "here", None)
    assert "pip" not in sys.modules
    assert shim.DISTUTILS_FINDER.spec_for_distutils.__name__ == "spec_for_distutils"
