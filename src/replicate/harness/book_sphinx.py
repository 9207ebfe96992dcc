"""Sphinx extension for the book: math that renders offline, and one citation style.

- MathJax is served from the book's own `_static/mathjax/` instead of a CDN, so a reader without
  internet sees equations, not TeX. Only the files a page loads are copied (the TeX-to-HTML
  component, its fonts, and the assistive-MathML extension its menu loads): 1.7 MB instead of the
  24 MB of the full distribution that `sphinx-mathjax-offline` ships and we copy from.
- The references page labels entries the way the text cites them, "[Humayun et al., 2024]",
  instead of pybtex's alpha labels ("[HBB24]").

Enabled in `_config.yml` under `sphinx.extra_extensions`.
"""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle

MATHJAX_FILES = ["tex-chtml.js", "output/chtml/fonts/woff-v2", "a11y/assistive-mml.js"]


def mathjax_source() -> Path:
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or spec.origin is None:
        raise RuntimeError("the book needs the package sphinx-mathjax-offline for offline math "
                           "(pip install -e . installs it)")
    return Path(spec.origin).parent / "static" / "mathjax"


def _copy_mathjax(app, exc) -> None:
    if exc is not None or app.builder.format != "html":
        return
    source, target = mathjax_source(), Path(app.outdir) / "_static" / "mathjax"
    for name in MATHJAX_FILES:
        src, dst = source / name, target / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copyfile(src, dst)


def _use_local_mathjax(app, config) -> None:
    mathjax_source()  # fail the build early, with a clear message, when the files are missing
    config.mathjax_path = "mathjax/tex-chtml.js"


class AuthorYearLabels(BaseLabelStyle):
    """'Humayun et al., 2024' (one or two authors are named in full), 'a'/'b' on clashes."""

    def format_labels(self, sorted_entries):
        labels = [self._label(entry) for entry in sorted_entries]
        suffix: dict[str, int] = {}
        for label in labels:
            if labels.count(label) > 1:  # a clash: 2024a, 2024b, ...
                suffix[label] = suffix.get(label, 0) + 1
                label += "abcdefghij"[suffix[label] - 1]
            yield label

    @staticmethod
    def _label(entry) -> str:
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        last = [" ".join(p.last_names) for p in people] or [entry.key]
        names = f"{last[0]} et al." if len(last) > 2 else " and ".join(last)
        return f"{names}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearStyle(PlainStyle):
    default_label_style = "authoryear"


register_plugin("pybtex.style.labels", "authoryear", AuthorYearLabels)
register_plugin("pybtex.style.formatting", "authoryear", AuthorYearStyle)


def setup(app):
    app.connect("config-inited", _use_local_mathjax)
    app.connect("build-finished", _copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
