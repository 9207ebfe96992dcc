"""What each claim check found, in one sentence a reader takes away.

A check's record says what was expected (its `name`), what we measured (`ours`) and the paper's
words (`paper`). The reader's question is different: what does the paper say, and what did we
find, in which direction? Each chapter answers it in `presets/<chapter>/findings.yml`, one entry
per claim check id, with a sentence for each outcome:

    lead: adversarial-rise          # the check whose finding speaks for a run that reproduces
    checks:
      size-descent-earlier:
        pass: "With more digits the second descent comes earlier ({ours}), as in the paper."
        fail: "With more digits the second descent comes later, not earlier ({ours})."
        inconclusive: "..."          # optional; else `fail`

A sentence is a `str.format` template: `{ours}` is the measured value as a person reads it,
`{ours[key]}` one entry of a mapping, `{ours.first}` / `{ours.last}` its first / last entry,
`{ours.values}` its values alone, `{paper}` the paper's words. An entry a run does not have
(another preset's keys) reads "n/a" rather than failing the page. The sentences are the pages'
prose, not result code: editing one re-runs nothing.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import yaml

from ..config import format_value
from ..runtime import PRESETS_DIR

# `.yml`: every `*.yaml` in a chapter's folder is one of its presets.
FILE = "findings.yml"
MOST_WORDS = 35
OUTCOMES = ("pass", "fail", "inconclusive")


def readable(value) -> str:
    """A check's measured value as a person reads it: `{settled at step: 60, T: 40000}` becomes
    "settled at step 60, T 40,000"; whole numbers with thousands separators, other numbers to
    three significant digits, true/false as yes/no, lists as "a, b"."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    whole = isinstance(value, float) and value.is_integer() and abs(value) >= 1000
    if isinstance(value, int) or whole:
        return f"{int(value):,}"
    if isinstance(value, (list, tuple)):
        items = [readable(v) for v in value]  # "; " where an item has a comma of its own
        return "(" + ("; " if any("," in i for i in items) else ", ").join(items) + ")"
    if isinstance(value, dict):
        return ", ".join(f"{k} {readable(v)}" for k, v in value.items())
    return format_value(value)


MISSING = object()  # an entry the run's value does not have


class Shown:
    """A check's value in a finding template: formats as a person reads it (`readable`); a value
    that is None (a step never reached) reads "none", an entry the run does not have "n/a"."""

    def __init__(self, value):
        self.value = value

    def __format__(self, spec: str) -> str:
        if self.value is MISSING:
            return "n/a"
        if self.value is None:
            return "none"
        if spec and isinstance(self.value, (int, float)) and not isinstance(self.value, bool):
            return format(self.value, spec)
        return readable(self.value)

    def __str__(self) -> str:
        return format(self)

    def __getitem__(self, key):
        value = self.value
        if isinstance(value, dict):
            return Shown(value.get(key, MISSING))
        if isinstance(value, (list, tuple)):
            try:
                return Shown(value[int(key)])
            except (ValueError, IndexError):
                return Shown(MISSING)
        return Shown(MISSING)

    def _entries(self) -> list:
        value = self.value
        if isinstance(value, dict):
            return list(value.values())
        return list(value) if isinstance(value, (list, tuple)) else [value]

    @property
    def first(self) -> "Shown":
        entries = self._entries()
        return Shown(entries[0] if entries else MISSING)

    @property
    def last(self) -> "Shown":
        entries = self._entries()
        return Shown(entries[-1] if entries else MISSING)

    @property
    def values(self) -> str:
        return ", ".join("none" if v is None else readable(v) for v in self._entries()) or "n/a"


@lru_cache(maxsize=None)
def sentences(chapter: str) -> dict:
    """The chapter's findings.yml as read ({} where it has none)."""
    path = PRESETS_DIR / chapter / FILE
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    for check_id, entry in (data.get("checks") or {}).items():
        unknown = set(entry) - set(OUTCOMES)
        if unknown or not {"pass", "fail"} <= set(entry):
            raise ValueError(f"{path}: check {check_id!r} needs 'pass' and 'fail' sentences "
                             f"(and may have 'inconclusive'); unknown: {sorted(unknown) or 'none'}")
    return data


def outcome(check: dict) -> str:
    if check.get("passed"):
        return "pass"
    return "inconclusive" if check.get("inconclusive") else "fail"


def finding(chapter: str, check: dict) -> str | None:
    """The sentence for one claim check's outcome, filled with its values; None where the chapter
    has no sentence for the check."""
    entry = (sentences(chapter).get("checks") or {}).get(check.get("id"))
    if not entry:
        return None
    template = entry.get(outcome(check)) or entry["fail"]
    return template.format(ours=Shown(check.get("ours")), paper=Shown(check.get("paper"))).strip()


def finding_or_name(chapter: str, check: dict) -> str:
    """The finding, or, for a check without one, its name and result."""
    from ..verdict import word

    return finding(chapter, check) or f"{check['name']}: {word(check).lower()}"


def lead_finding(record: dict) -> str:
    """One sentence for a run: the first failing claim check's finding where one fails, else the
    finding of the chapter's `lead` check (or of its first claim check)."""
    claims = [c for c in record["checks"] if c["kind"] == "claim"]
    failed = [c for c in claims if not c["passed"]]
    if failed:
        return finding_or_name(record["chapter"], failed[0])
    lead = sentences(record["chapter"]).get("lead")
    chosen = next((c for c in claims if c.get("id") == lead), claims[0] if claims else None)
    return finding_or_name(record["chapter"], chosen) if chosen else ""


def words(text: str) -> int:
    return len(re.findall(r"\S+", text))


def problems(chapter: str, checks: list[dict]) -> list[str]:
    """What is wrong with a chapter's findings for these checks: a claim check without one, a
    sentence over MOST_WORDS words, a check id or nested bracket in it."""
    found = []
    for c in checks:
        if c["kind"] != "claim":
            continue
        text = finding(chapter, c)
        if text is None:
            found.append(f"{chapter} {c.get('id')}: no finding")
            continue
        if words(text) > MOST_WORDS:
            found.append(f"{chapter} {c['id']}: {words(text)} words: {text}")
        if re.search(r"\([^()]*\(", text):
            found.append(f"{chapter} {c['id']}: nested brackets: {text}")
        if c["id"] in text:
            found.append(f"{chapter} {c['id']}: names its check id")
    return found


def main(argv: list[str] | None = None) -> int:
    """`python -m replicate.harness.findings [CHAPTER ...]`: every published run's findings
    (cpu, paper, the test split's archive) with their word counts, and any problem."""
    import json
    import sys

    from ..config import chapters
    from ..runtime import BOOK_DIR

    names = (argv if argv is not None else sys.argv[1:]) or list(chapters())
    bad = []
    for name in names:
        for folder in ("", "paper", "test-split", "test-split/paper"):
            path = BOOK_DIR / "results" / folder / f"{name}.json"
            if not path.exists():
                continue
            record = json.loads(path.read_text())
            print(f"## {name} {folder or 'cpu'}")
            for c in record["checks"]:
                if c["kind"] == "claim":
                    text = finding(name, c) or "(no finding)"
                    print(f"  {outcome(c):12s} {c['id']}: [{words(text)}] {text}")
            bad += problems(name, record["checks"])
    for line in bad:
        print("PROBLEM", line)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
