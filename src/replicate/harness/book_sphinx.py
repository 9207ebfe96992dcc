"""Sphinx extension for the book: math that renders offline, and one citation style.

- The math is typeset when the book is built, not in the reader's browser: MathJax in node
  (`typeset/`, installed by `make venv`) turns every TeX span of the written pages into SVG with
  its MathML beside it for screen readers, and the pages load no MathJax (0.9 MB a page less;
  chapter 04's page: 2.09 MB to about 1.4 MB). Without node the build says so in one line and
  falls back to MathJax in the browser, served from the book's own `_static/mathjax/` (a reader
  without internet still sees equations): only the components a page loads are copied (startup,
  core, TeX input, HTML output with its fonts, assistive MathML), not the 24 MB of the full
  distribution that `sphinx-mathjax-offline` ships.
- The theme's 1.5 MB Font Awesome script, which redraws every icon as an SVG, is replaced by a
  stub: the icons are drawn by the Font Awesome web font that the theme's CSS already loads. That
  CSS keeps the rules of the icons the pages and scripts use (about 20 of 1,900: 86 KB less).
- Every figure's PNG is stored with a palette of at most 256 colours (`palette_png`): a plot has
  few colours, so it looks the same and weighs about a third (chapter 04's seven figures: 408 KB
  to 147 KB).
- The references page labels entries the way the text cites them, "[Humayun et al., 2024]",
  instead of pybtex's alpha labels ("[HBB24]").
- Each inline script once per page: Sphinx 7.4 records a script that an extension adds after
  the builder exists twice (`app.add_js_file(None, body=...)` goes to the registry as filename
  "" and to the builder as None, which compare unequal), so sphinx-thebe's
  `const THEBE_JS_URL = ...` ran twice and every page logged a SyntaxError.
- The repository button in the header when `_config.yml` sets `html.repository_url`.
- The About page says when and from which commit this copy was built (also its citation's version).
- Figures and exercises are numbered within their chapter, after it: "Figure 4.2", "Exercise 8.1"
  (Sphinx counts them across the whole book when the table of contents is not numbered).
- The papers' numbers in the chapters' prose come from the chapters' `paper:` blocks (typed
  there only) as MyST substitutions: `{{ paper04.ce_factor }}` (see `paper_substitutions`).

Enabled in `_config.yml` under `sphinx.extra_extensions`.
"""
from __future__ import annotations

import datetime
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import yaml

from pybtex.plugin import register_plugin
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle

# The components a page asks MathJax's loader for (core and the fonts come with them).
MATHJAX_COMPONENTS = ["input/tex", "output/chtml", "a11y/assistive-mml"]
MATHJAX_FILES = ["startup.js", "core.js", *(f"{c}.js" for c in MATHJAX_COMPONENTS),
                 "output/chtml/fonts/tex.js", "output/chtml/fonts/woff-v2"]
MATH_CACHE_ID = "MJX-SVG-global-cache"  # the glyphs of a typeset page (typeset/typeset.cjs)
FONTAWESOME_SCRIPT = "_static/scripts/fontawesome.js"
FONTAWESOME_STUB = ("/* Not loaded: the theme's icons are drawn by the Font Awesome web font that its"
                    " CSS loads (replicate.harness.book_sphinx). */\n")


TYPESET_SCRIPT = "typeset/typeset.cjs"  # relative to the project root
MATHJAX_IN_NODE = "typeset/node_modules/mathjax-full"


@lru_cache(maxsize=1)
def math_typesetter() -> list[str] | None:
    """The command that typesets built pages' math (`node typeset/typeset.cjs`, page paths to
    follow), or None where node or its MathJax is not installed."""
    from ..runtime import PROJECT_ROOT

    node = shutil.which("node")
    if node is None or not (PROJECT_ROOT / MATHJAX_IN_NODE).is_dir():
        return None
    return [node, str(PROJECT_ROOT / TYPESET_SCRIPT)]


def typeset_math(pages: list[Path]) -> int:
    """Typeset the TeX of written HTML pages as SVG, in place; the number of formulas. Pages
    typeset before (an incremental build leaves unchanged pages as they were) are left alone."""
    todo = [str(p) for p in pages if MATH_CACHE_ID not in p.read_text(errors="ignore")]
    if not todo:
        return 0
    done = subprocess.run([*math_typesetter(), *todo], capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"typesetting the math failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["math"]


def mathjax_source() -> Path:
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or spec.origin is None:
        raise RuntimeError("the book needs the package sphinx-mathjax-offline for offline math "
                           "(pip install -e . installs it)")
    return Path(spec.origin).parent / "static" / "mathjax"


def _typeset_or_copy_mathjax(app, exc) -> None:
    if exc is not None or app.builder.format != "html":
        return
    if math_typesetter() is not None:
        typeset_math(sorted(Path(app.outdir).rglob("*.html")))
        return
    source, target = mathjax_source(), Path(app.outdir) / "_static" / "mathjax"
    for name in MATHJAX_FILES:
        src, dst = source / name, target / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, dirs_exist_ok=True)
        else:
            shutil.copyfile(src, dst)


SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def number_text(value) -> str:
    """A paper's number as the prose writes it: 7.56, 1442.63, 10, and 1.09 × 10¹⁵ from 1e6 on."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if abs(value) >= 1e6:
        mantissa, exponent = f"{value:.3g}".split("e")
        return f"{mantissa} × 10{str(int(exponent)).translate(SUPERSCRIPTS)}"
    return f"{value:g}"


def paper_substitutions() -> dict[str, dict[str, str]]:
    """The papers' numbers for the chapters' Markdown, so that none is typed in a notebook.

    Chapter NN's `paper:` block becomes the substitution `paperNN`, one entry per number (its key
    with "_" for "-"): `{{ paper04.ce_factor }}` is "7.56". A number given with a band also has
    `_low`, `_high` and `_sd` (the band's half-width, for a mean +- s.d.), and one in (0, 1] a
    `_pct` ("98%"). Words given for a number (`value: "not given"`) come as they are."""
    from ..config import chapters

    substitutions = {}
    for name, chapter in chapters().items():
        numbers = {}
        for key, number in chapter.paper.items():
            slot = key.replace("-", "_")
            numbers[slot] = number_text(number.value)
            if number.band is not None and number.band[0] != number.band[1]:
                low, high = number.band
                numbers |= {f"{slot}_low": number_text(low), f"{slot}_high": number_text(high),
                            f"{slot}_sd": number_text(round((high - low) / 2, 12))}
            if isinstance(number.value, float) and 0 < number.value <= 1:
                numbers[f"{slot}_pct"] = f"{100 * number.value:g}%"
        substitutions[f"paper{name[:2]}"] = numbers
    return substitutions


def _paper_numbers(app, config) -> None:
    config.myst_substitutions = {**(config.myst_substitutions or {}), **paper_substitutions()}


def _use_local_mathjax(app, config) -> None:
    if math_typesetter() is None:
        print("math: node or its MathJax is missing (`make venv` installs it with npm): the "
              "pages load MathJax and typeset in the reader's browser (0.9 MB a page more)",
              file=sys.stderr)
    mathjax_source()  # fail the build early, with a clear message, when the files are missing
    config.mathjax_path = "mathjax/startup.js"
    config.mathjax3_config = {**(config.mathjax3_config or {}),
                              "loader": {"load": MATHJAX_COMPONENTS}}


THEME_CSS = "_static/styles/pydata-sphinx-theme.css"
ICON_RULE = re.compile(r'((?:\.fa-[a-z0-9-]+:before,?)+)\{content:"[^"]*"\}')


def used_icon_rules(css: str, used: set[str]) -> str:
    """`css` without the Font Awesome rules (`.fa-x:before,.fa-y:before{content:"..."}`) whose
    icons are all outside `used` (names such as "fa-bars")."""
    def keep(rule: re.Match) -> str:
        names = set(re.findall(r"\.(fa-[a-z0-9-]+):before", rule.group(1)))
        return rule.group(0) if names & used else ""
    return ICON_RULE.sub(keep, css)


def _lighten_the_theme(app, exc) -> None:
    out = Path(app.outdir)
    if exc is not None or app.builder.format != "html" or not (out / FONTAWESOME_SCRIPT).exists():
        return
    (out / FONTAWESOME_SCRIPT).write_text(FONTAWESOME_STUB)
    used = {name for page in [*out.rglob("*.html"), *(out / "_static").rglob("*.js")]
            for name in re.findall(r"fa-[a-z0-9-]+", page.read_text(errors="ignore"))}
    css = out / THEME_CSS
    if css.exists():
        css.write_text(used_icon_rules(css.read_text(), used))


def _is_mathjax(script) -> bool:
    return "mathjax" in (script.filename or "") or "window.MathJax" in script.attributes.get(
        "body", "")


def _scripts_a_page_loads(app, pagename, templatename, context, doctree) -> None:
    """Each script once (Sphinx 7.4 lists an inline one twice, see above), and none of MathJax's
    where the build typesets the math itself."""
    typeset, seen, kept = math_typesetter() is not None, set(), []
    for script in context.get("script_files", []):
        key = (script.filename or "", tuple(sorted(script.attributes.items())))
        if key not in seen and not (typeset and _is_mathjax(script)):
            seen.add(key)
            kept.append(script)
    context["script_files"] = kept


def repository_url() -> str:
    """`html.repository_url` of the book's `_config.yml` ("" when unset)."""
    from ..runtime import PROJECT_ROOT

    config = yaml.safe_load((PROJECT_ROOT / "_config.yml").read_text()) or {}
    return ((config.get("html") or {}).get("repository_url") or "").strip()


def _repository_button(app, config) -> None:
    if url := repository_url():
        config.html_theme_options.update(repository_url=url, use_repository_button=True)


ABOUT_PAGE = "book/about"


def _reread_about_page(app, env, added, changed, removed) -> list[str]:
    # Its build stamp changes with every build, although its source does not.
    return [ABOUT_PAGE] if ABOUT_PAGE in env.found_docs else []


def _stamp_about_page(app, docname, source) -> None:
    from ..runtime import git_commit

    if docname == ABOUT_PAGE:
        from .scoreboard import BUILD_COMMIT

        source[0] = source[0].replace(BUILD_COMMIT, f"commit {git_commit()}")
        source[0] += (f"\n\nThis copy of the book was built on {datetime.date.today():%Y-%m-%d} "
                      f"from commit `{git_commit()}`.\n")


def chapter_number(docname: str) -> int | None:
    """4 for the chapter page "book/claims/04_grokalign_speedup"; None for any other page."""
    folder, _, name = docname.rpartition("/")
    prefix = name.split("_", 1)[0]
    return int(prefix) if folder.endswith("claims") and prefix.isdigit() else None


def _number_within_chapters(app, env) -> list[str]:
    # Runs after Sphinx has numbered every figure and exercise across the book (priority 900).
    for docname, kinds in env.toc_fignumbers.items():
        prefix = (n,) if (n := chapter_number(docname)) is not None else ()
        for kind, numbers in kinds.items():
            in_order = sorted(numbers, key=numbers.get)
            kinds[kind] = {target: (*prefix, i) for i, target in enumerate(in_order, 1)}
    return []


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


def palette_png(path: Path, colours: int = 256) -> bool:
    """Rewrite the PNG at `path` with a palette of at most `colours` colours (median cut, no
    dithering, so flat areas and lines stay flat), where that is smaller; True if it was. A PNG
    that already has a palette is left alone, so running this twice changes nothing."""
    from PIL import Image
    with Image.open(path) as image:
        if image.mode == "P":
            return False
        rgb = image.convert("RGB")
    smaller = path.with_suffix(".palette.png")
    rgb.quantize(colors=colours, method=Image.Quantize.MEDIANCUT,
                 dither=Image.Dither.NONE).save(smaller, "PNG", optimize=True)
    if smaller.stat().st_size < path.stat().st_size:
        smaller.replace(path)
        return True
    smaller.unlink()
    return False


def _lighten_figures(app, exc) -> None:
    if exc is not None or app.builder.format != "html":
        return
    for png in sorted((Path(app.outdir) / "_images").glob("*.png")):
        palette_png(png)


def setup(app):
    app.connect("config-inited", _use_local_mathjax)
    app.connect("config-inited", _repository_button)
    app.connect("config-inited", _paper_numbers)
    app.connect("build-finished", _typeset_or_copy_mathjax)
    app.connect("build-finished", _lighten_the_theme)
    app.connect("build-finished", _lighten_figures)
    app.connect("html-page-context", _scripts_a_page_loads, priority=900)
    app.connect("env-get-outdated", _reread_about_page)
    app.connect("source-read", _stamp_about_page)
    app.connect("env-get-updated", _number_within_chapters, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
