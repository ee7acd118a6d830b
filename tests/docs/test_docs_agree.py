"""The documentation agrees with the code (issue 52): docs/guide/commands.md lists every
subcommand and every flag of the argument parsers (and no other); the README and the site's
home page (docs/index.md) state the same numbers."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ROOT / "docs" / "guide" / "commands.md"
FLAG = r"--[a-z][a-z0-9-]*"


def parsers() -> dict:
    """Subcommand → its argparse parser."""
    import argparse

    from gossipfl.cli import build_parser

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def documented() -> dict[str, str]:
    """Subcommand → the usage lines commands.md gives it (the first cell of its rows)."""
    rows: dict[str, str] = {}
    for line in COMMANDS.read_text().splitlines():
        match = re.match(r"\| `gossipfl (\w+)(.*?)` \|", line)
        if match:
            rows[match[1]] = rows.get(match[1], "") + " " + match[2]
    return rows


def flags(parser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")} - {
        "--help"}


def test_commands_md_lists_every_subcommand_and_every_flag():
    rows = documented()
    missing = {name: sorted(f for f in flags(p) if not re.search(rf"{f}(?![\w-])",
                                                                  rows.get(name, "")))
               for name, p in parsers().items()}
    assert set(parsers()) <= set(rows), sorted(set(parsers()) - set(rows))
    assert not any(missing.values()), {k: v for k, v in missing.items() if v}


def test_commands_md_names_no_flag_the_command_does_not_take():
    known = parsers()
    extra = {name: sorted(set(re.findall(FLAG, usage)) - flags(known[name]))
             for name, usage in documented().items() if name in known}
    assert set(documented()) <= set(known), sorted(set(documented()) - set(known))
    assert not any(extra.values()), {k: v for k, v in extra.items() if v}


def _home_hook():
    import importlib.util

    spec = importlib.util.spec_from_file_location("home_hook", ROOT / "docs/hooks/home.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_home_page_is_the_readme_with_links_into_the_site():
    """One source for the README and the site's home page: docs/hooks/home.py makes
    index.md from the README (no docs/index.md to go stale), and every link it keeps
    resolves to a page of the site."""
    import yaml

    home = _home_hook().home((ROOT / "README.md").read_text())
    assert not (ROOT / "docs" / "index.md").exists()
    assert "hooks/home.py" in (ROOT / "mkdocs.yml").read_text()
    assert home.splitlines()[0] == "# gossipfl" and "](docs/" not in home
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", home)
    assert len(targets) > 20
    for target in targets:
        if "://" not in target:
            assert (ROOT / "docs" / target).is_file(), target
    assert yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"][0] == {"Home": "index.md"}


def test_the_readme_links_every_guide_page():
    readme = (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs" / "guide").glob("*.md")):
        assert f"(docs/guide/{page.name})" in readme, page.name


def test_the_sample_table_in_studies_md_has_todays_columns(tmp_path):
    """studies.md shows what `gossipfl sweep examples/study_quick.yaml` prints: the same
    study on a tiny problem gives the header and the rows' labels the page shows, and each
    row of the page has as many cells as the header."""
    import yaml

    import gossipfl
    from tests.helpers import TINY

    study = yaml.safe_load((ROOT / "examples" / "study_quick.yaml").read_text())
    made = gossipfl.sweep({**study, "base": TINY}, out=tmp_path, quiet=True)
    table = made.report.markdown.strip().splitlines()
    page = (ROOT / "docs" / "guide" / "studies.md").read_text()
    after = page.split("`gossipfl sweep examples/study_quick.yaml`", 1)[1]
    sample = after.split("```text\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert sample[0] == table[0]
    assert [row.split("|")[1].strip() for row in sample[2:]] == \
        [row.split("|")[1].strip() for row in table[2:]]
    assert {row.count("|") for row in sample} == {table[0].count("|")}
