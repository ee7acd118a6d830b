"""MkDocs hook: the site's home page is the README, so the two cannot disagree.

``index.md`` is generated from ``README.md`` at build time (there is no docs/index.md to
drift): links into ``docs/`` lose that prefix (``docs/guide/trust.md`` → ``guide/trust.md``),
and the link to the ``docs/`` folder itself becomes its text.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def home(readme: str) -> str:
    """The README as the site's home page: its links made relative to docs/."""
    text = re.sub(r"\[([^\]]*)\]\(docs/\)", r"\1", readme)
    return re.sub(r"\]\(docs/", "](", text)


def on_files(files, config, **kwargs):
    from mkdocs.structure.files import File

    files.append(File.generated(config, "index.md",
                                content=home((ROOT / "README.md").read_text(encoding="utf-8"))))
    return files
