"""A chapter's configuration, and a run's identity: `RunSpec(chapter, preset, overrides)`.

Each chapter has a folder `presets/<chapter>/`:
- `cpu.yaml`, the full preset and the schema: it names every parameter, fixes its type, and says
  what it is in a comment on its line (`python -m replicate list CHAPTER` prints them);
- `smoke.yaml` and `paper.yaml`, only the values that differ from `cpu`;
- `chapter.yaml`: title, claim, and what is checked before a notebook starts: `positive:`
  parameters, `ranges:` (`"(0, 1]"`: parenthesis open, bracket closed; every item of a list),
  `choices:`, `rules:` between parameters (a Python expression over the parameter names and the
  reason shown when it fails), the `datasets:` it reads and the MNIST digits it needs
  (`data_needs:`); `shape_only:` overrides that cut `paper` down to minutes; `tolerance:` for
  `validate`; `paper:`, the numbers the paper gives that the chapter compares with
  (`Chapter.paper`: each a value, the band it spans and where in the paper it is);
  `paper_reduced:`, the -p values (and why) with which a paper run may still be published as the
  chapter's paper verdict, where the paper's own size does not fit a CPU (`paper_reduction`).

A run is a value: the chapter, a preset and the parameters changed from it. It is resolved and
validated once here (`RunSpec.make`), passed to the notebook as its one parameter `spec`, and
recorded as it is in the verdict. Nothing here imports torch: bad input is refused in a blink.
"""
from __future__ import annotations

import ast
import functools
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .runtime import NOTEBOOKS_DIR, PRESETS_DIR

SCHEMA_PRESET = "cpu"  # the full preset, and the book's
SHAPE_ONLY_BASE = "paper"
SEED_RANGE = (0, 2**32 - 1)  # what numpy's and torch's seeding accept
MAX_SEEDS = 1000


class ConfigError(ValueError):
    """Bad chapter, preset or parameter; raised before anything is computed."""


@dataclass(frozen=True)
class PaperNumber:
    """One number the paper gives: `value` (a number, or words where it gives none), the `band`
    it spans (low, high) (a mean +- s.d., a range read off a figure; (value, value) for a bare
    number), `where` in the paper it stands, and `what` it measures."""
    value: Any
    band: tuple[float, float] | None
    where: str
    what: str

    @classmethod
    def read(cls, key: str, entry: dict) -> "PaperNumber":
        unknown = sorted(set(entry) - {"value", "band", "where", "what"})
        if unknown or not {"value", "where", "what"} <= set(entry):
            raise ConfigError(f"paper number {key!r}: give value, where and what (and optionally "
                              f"band); unknown: {', '.join(unknown) or 'none'}")
        value, band = entry["value"], entry.get("band")
        if band is None and isinstance(value, (int, float)) and not isinstance(value, bool):
            band = (value, value)
        if band is not None:
            if len(band) != 2 or not band[0] <= band[1]:
                raise ConfigError(f"paper number {key!r}: band must be [low, high], low <= high")
            band = (float(band[0]), float(band[1]))
        return cls(value, band, str(entry["where"]), str(entry["what"]))


@dataclass(frozen=True)
class Chapter:
    name: str
    title: str
    claim: str
    presets: tuple[str, ...]
    meta: dict = field(default_factory=dict, compare=False, repr=False)  # chapter.yaml as read

    @property
    def notebook(self) -> Path:
        return NOTEBOOKS_DIR / f"{self.name}.ipynb"

    def get(self, key: str, default: Any = None) -> Any:
        return self.meta.get(key) or default

    @property
    def paper(self) -> dict[str, PaperNumber]:
        """The `paper:` block: the paper's numbers by key, the one place they are typed."""
        return {key: PaperNumber.read(key, entry) for key, entry in (self.get("paper") or {}).items()}


def _read_yaml(path: Path) -> dict:
    with open(path) as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of names to values")
    return _numbers_in(data)


@functools.lru_cache(maxsize=None)
def _chapters(root: Path) -> dict[str, Chapter]:
    found = {}
    for meta_path in sorted(root.glob("*/chapter.yaml")):
        meta, folder = _read_yaml(meta_path), meta_path.parent
        names = tuple(sorted(p.stem for p in folder.glob("*.yaml") if p.stem != "chapter"))
        found[folder.name] = Chapter(folder.name, meta["title"], meta["claim"], names, meta)
    return found


def chapters() -> dict[str, Chapter]:
    """Every chapter that has a `chapter.yaml`, in book order (read once per process)."""
    return _chapters(PRESETS_DIR)


def get_chapter(name: str) -> Chapter:
    known = chapters()
    if name not in known:
        raise ConfigError(f"unknown chapter {name!r}; valid chapters: {', '.join(known) or '(none)'}")
    return known[name]


@functools.lru_cache(maxsize=None)
def _preset_file(chapter: str, preset: str) -> dict:
    return _read_yaml(PRESETS_DIR / chapter / f"{preset}.yaml")


def load_preset(chapter: str, preset: str) -> dict[str, Any]:
    """The preset's full parameter set: cpu.yaml with the preset's own values on top."""
    ch = get_chapter(chapter)
    if preset not in ch.presets:
        raise ConfigError(f"unknown preset {preset!r} for chapter {chapter}; "
                          f"valid presets: {', '.join(ch.presets)}")
    schema = _preset_file(chapter, SCHEMA_PRESET)
    delta = _preset_file(chapter, preset)
    stray = sorted(set(delta) - set(schema))
    if stray:
        raise ConfigError(f"{chapter}/{preset}.yaml sets {', '.join(stray)}, which cpu.yaml lacks")
    return {**schema, **delta}


def parameter_notes(chapter: str) -> dict[str, str]:
    """What each parameter is: the comment on its line of cpu.yaml, continued on the indented
    comment lines right below it."""
    notes: dict[str, str] = {}
    last = None
    for line in (PRESETS_DIR / chapter / f"{SCHEMA_PRESET}.yaml").read_text().splitlines():
        key = re.match(r"^(\w+)\s*:.*?(?:\s#\s*(.*))?$", line)
        if key:
            last = key.group(1)
            notes[last] = key.group(2) or ""
        elif last and re.match(r"^\s+#", line):
            notes[last] = f"{notes[last]} {line.strip().lstrip('#').strip()}".strip()
        else:
            last = None
    return notes


# --------------------------------------------------------------------------------------------
# Values typed on a command line


def _scalar(text: str) -> Any:
    """One command-line item: int, float (`1e-3` too), `true`/`false`, else the string itself."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def _numbers_in(value: Any) -> Any:
    """YAML 1.1 reads `1e-3` (no dot) as a string: turn such strings back into numbers."""
    if isinstance(value, list):
        return [_numbers_in(v) for v in value]
    if isinstance(value, dict):
        return {k: _numbers_in(v) for k, v in value.items()}
    if isinstance(value, str) and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+", value.strip()):
        return float(value)
    return value


def parse_value(text: str) -> Any:
    """Read a command-line value without surprises.

    `20000` is an int, `1e-3` a float, `true`/`false` booleans, `1e-3,1e-2` and `[1e-3, 0.01]`
    lists (their items read the same way), `{mse: [0], ce: [0, 1]}` a mapping; anything else is
    the string as typed (`-`, `*`, `s5`).
    """
    text = text.strip()
    if text.startswith("[") and text.endswith("]") and not any(c in text[1:-1] for c in "[]{}"):
        inner = text[1:-1].strip()
        return [_scalar(item) for item in inner.split(",")] if inner else []
    if text.startswith(("[", "{")):
        try:
            return _numbers_in(yaml.safe_load(text))
        except yaml.YAMLError as err:
            raise ConfigError(f"cannot read {text!r} as a list or mapping "
                              f"({str(err).splitlines()[0]}); e.g. '[0.1, 0.2]' or "
                              f"'{{mse: [0], ce: [0, 1]}}'") from None
    if "," in text:
        return [_scalar(item) for item in text.split(",")]
    return _scalar(text)


def shortened(text: str, limit: int = 200) -> str:
    """`text` cut to about `limit` characters for an error line: its start and end, the number of
    characters left out between them."""
    text = str(text)
    if len(text) <= limit:
        return text
    keep = limit // 2
    return f"{text[:keep]}...[{len(text) - 2 * keep} characters]...{text[-keep:]}"


def parse_seeds(text: str) -> list[int]:
    """`0-4` -> [0, 1, 2, 3, 4]; `0,3,7` -> [0, 3, 7]; ranges and lists mix. At most MAX_SEEDS
    seeds, each in the seed's range, checked before anything is expanded."""
    bounds = []
    for part in str(text).split(","):
        # at most 10 digits each: 2**32 - 1 has 10, and int() of a huge string is refused
        match = re.fullmatch(r"\s*(\d{1,10})\s*(?:-\s*(\d{1,10})\s*)?", part)
        if not match or (match[2] and int(match[2]) < int(match[1])):
            raise ConfigError(f"--seeds: cannot read {shortened(part.strip())!r}; write e.g. 0-4 or "
                              "0,3,7 (seeds are integers from 0 to 2**32 - 1)")
        bounds.append((int(match[1]), int(match[2] or match[1])))
    if sum(hi - lo + 1 for lo, hi in bounds) > MAX_SEEDS:
        raise ConfigError(f"--seeds {shortened(text)}: at most {MAX_SEEDS} seeds in one sweep")
    if max(hi for _, hi in bounds) > SEED_RANGE[1]:
        raise ConfigError(f"--seeds {shortened(text)}: a seed must lie in [0, 2**32 - 1]")
    return sorted({s for lo, hi in bounds for s in range(lo, hi + 1)})


def split_values(text: str) -> list[str]:
    """Split `V1,V2,...` at the commas outside brackets: `[1, 2],[3, 4]` is two values."""
    parts, depth, current = [], 0, ""
    for char in text:
        depth += (char in "[{(") - (char in "]})")
        if char == "," and depth == 0:
            parts, current = parts + [current.strip()], ""
        else:
            current += char
    parts.append(current.strip())
    if "" in parts:
        raise ConfigError(f"empty value in {text!r}")
    return parts


def format_value(value: Any, digits: int = 3) -> str:
    """A value as the book and the command line show it: floats to `digits` significant digits,
    booleans in lower case, lists in brackets, mappings as `key: value`."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v, digits) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {format_value(v, digits)}" for k, v in value.items()) + "}"
    return str(value)


def is_item_list(value: Any) -> bool:
    """A list of items (names, pairs), not of numbers: which items cross a threshold can change
    with float noise from one machine to the next, so the verdict cell shows, and `validate`
    compares, how many there are (`counted`); the items are listed in the checks table."""
    return isinstance(value, (list, tuple)) and bool(value) and not any(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)


def counted(value: Any) -> Any:
    """`value` with each list of items (`is_item_list`) replaced by its count, in words."""
    if is_item_list(value):
        return f"{len(value)} item{'s' if len(value) != 1 else ''} (listed in the table below)"
    if isinstance(value, dict):
        return {k: counted(v) for k, v in value.items()}
    return value


def example(name: str, template: Any) -> str:
    """A command-line setting of `name` that parses to a value of `template`'s type."""
    if isinstance(template, list) and template and not isinstance(template[0], (list, dict)):
        text = ",".join(format_value(v, 12) for v in template)
    else:
        text = format_value(template, 12)
    return f"-p {name} {shlex.quote(text)}"


# --------------------------------------------------------------------------------------------
# Validation


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        inner = sorted({_type_name(v) for v in value}) or ["any"]
        return f"list of {'/'.join(inner)}"
    return type(value).__name__


def _coerce(name: str, value: Any, template: Any, top: tuple[str, Any] | None = None) -> Any:
    """Return `value` in the type of `template`, or raise ConfigError (with an example)."""
    top = top or (name, template)
    kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,), list: (list,), dict: (dict,)}
    kind = next((k for k in kinds if isinstance(template, k)), None)
    wrong_bool = isinstance(value, bool) and kind in (int, float)
    if kind is None or wrong_bool or not isinstance(value, kinds[kind]):
        raise ConfigError(f"parameter {name!r} must be of type {_type_name(template)} "
                          f"(cpu preset: {template!r}); got {value!r} ({_type_name(value)}). "
                          f"For example: {example(*top)}")
    if kind is float:
        return float(value)
    if kind is list and template:
        return [_coerce(f"{name}[{i}]", v, template[0], top) for i, v in enumerate(value)]
    return value


def _numbers(value: Any) -> list:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, (list, dict)):
        return [n for v in (value.values() if isinstance(value, dict) else value) for n in _numbers(v)]
    return []


def _in_interval(x: float, interval: str) -> bool:
    text = interval.strip()
    lo, hi = (float(t) for t in text[1:-1].split(","))
    return (lo <= x if text[0] == "[" else lo < x) and (x <= hi if text[-1] == "]" else x < hi)


RULE_FUNCTIONS = {"min": min, "max": max, "len": len, "all": all, "any": any, "set": set,
                  "sorted": sorted, "abs": abs, "sum": sum}


def _rule_names(expression: str) -> set[str]:
    """The parameter names a rule reads (not its functions, nor the variables it binds itself)."""
    nodes = [n for n in ast.walk(ast.parse(expression, mode="eval")) if isinstance(n, ast.Name)]
    bound = {n.id for n in nodes if isinstance(n.ctx, ast.Store)}
    return {n.id for n in nodes} - bound - set(RULE_FUNCTIONS)


def _check_rule(chapter: str, expression: str, because: str, params: dict[str, Any]) -> None:
    shown = ", ".join(f"{n}={params[n]!r}" for n in sorted(_rule_names(expression)))
    try:
        ok = eval(compile(expression, "<rule>", "eval"),  # noqa: S307 - our own chapter.yaml
                  {"__builtins__": {}, **RULE_FUNCTIONS, **params})
    except Exception as err:  # noqa: BLE001 - e.g. min() of an empty list
        ok, shown = False, f"{shown}; {type(err).__name__}: {err}"
    if not ok:
        raise ConfigError(f"chapter {chapter}: {because or 'rule failed'} "
                          f"(rule: {expression}; got {shown})")


def validate(chapter: str, params: dict[str, Any]) -> dict[str, Any]:
    """Check `params` against the chapter's cpu preset and chapter.yaml: names, types, finite
    numbers, the seed's range, signs (`positive:`), `ranges:`, `choices:` and, for the rules whose
    parameters are all in `params`, the `rules:` between parameters. Raises ConfigError."""
    ch = get_chapter(chapter)
    schema = load_preset(chapter, SCHEMA_PRESET)
    unknown = sorted(set(params) - set(schema))
    if unknown:
        raise ConfigError(f"unknown parameter(s) {', '.join(unknown)} for chapter {chapter}; "
                          f"valid parameters: {', '.join(schema)}")
    checked = {name: _coerce(name, value, schema[name]) for name, value in params.items()}
    for name, value in checked.items():
        if not all(math.isfinite(v) for v in _numbers(value)):
            raise ConfigError(f"parameter {name!r} must be a finite number; got {value!r}. "
                              f"For example: {example(name, schema[name])}")
    if "seed" in checked and not SEED_RANGE[0] <= checked["seed"] <= SEED_RANGE[1]:
        raise ConfigError(f"parameter 'seed' must lie in [0, 2**32 - 1]; got {checked['seed']}")
    for name in ch.get("positive", ()):
        if name in checked and any(v <= 0 for v in _numbers(checked[name])):
            raise ConfigError(f"parameter {name!r} must be positive; got {checked[name]!r}")
    for name, interval in ch.get("ranges", {}).items():
        if name in checked and not all(_in_interval(v, interval) for v in _numbers(checked[name])):
            raise ConfigError(f"parameter {name!r} must lie in {interval}; got {checked[name]!r}")
    for name, allowed in ch.get("choices", {}).items():
        value = checked.get(name)
        values = value if isinstance(value, list) else [value]
        if value is not None and any(v not in allowed for v in values):
            raise ConfigError(f"parameter {name!r} must be one of {', '.join(map(str, allowed))}; "
                              f"got {value!r}")
    for rule in ch.get("rules", ()):
        if _rule_names(rule["require"]) <= set(checked):
            _check_rule(chapter, rule["require"], rule.get("because", ""), checked)
    return checked


def paper_reduction(spec: "RunSpec") -> dict | None:
    """How a `paper` run differs from the paper's settings, where it differs only as its
    chapter.yaml allows (`paper_reduced:`, a size this CPU can run and why): {name: {asked, used,
    why}}, {} for the paper preset as it is, None for any other run (another preset, or -p values
    the chapter does not declare). Only such a run is published as the chapter's paper verdict."""
    if spec.preset != "paper":
        return None
    declared = get_chapter(spec.chapter).get("paper_reduced") or {}
    given = spec.without_seed()
    if any(name not in declared or declared[name]["used"] != value for name, value in given.items()):
        return None
    asked = load_preset(spec.chapter, "paper")
    return {name: {"asked": asked[name], "used": value, "why": declared[name]["why"]}
            for name, value in given.items()}


# --------------------------------------------------------------------------------------------
# A run's identity


def label(preset: str, overrides: dict) -> str:
    """`smoke + iterations=500`: for people only (captions, messages); code reads the fields."""
    return " + ".join([preset] + [f"{k}={format_value(v)}" for k, v in overrides.items()])


@dataclass(frozen=True)
class RunSpec:
    """One run of a chapter: its preset and the parameters changed from it (only those whose
    value differs from the preset's), with the full parameter set they resolve to."""
    chapter: str
    preset: str
    overrides: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def make(cls, chapter: str, preset: str = SCHEMA_PRESET, overrides: dict | None = None) -> "RunSpec":
        """Resolve and validate: the preset's values with `overrides` on top. Raises ConfigError."""
        base = load_preset(chapter, preset)
        given = validate(chapter, dict(overrides or {}))
        params = validate(chapter, {**base, **given})  # the rules between parameters need them all
        changed = {k: v for k, v in given.items() if base[k] != v}
        return cls(chapter, preset, dict(sorted(changed.items())), params)

    @classmethod
    def shape_only(cls, chapter: str, overrides: dict | None = None) -> "RunSpec":
        """The `paper` preset with the chapter's `shape_only:` cuts (then `overrides`) on top."""
        cuts = get_chapter(chapter).get("shape_only")
        if not cuts:
            raise ConfigError(f"chapter {chapter} has no shape_only overrides in its chapter.yaml")
        return cls.make(chapter, SHAPE_ONLY_BASE, {**cuts, **(overrides or {})})

    @classmethod
    def from_record(cls, record: dict) -> "RunSpec":
        """The spec a verdict (or task) record was run with."""
        return cls.make(record["chapter"], record["preset"], record.get("overrides") or {})

    @property
    def seed(self) -> int:
        return int(self.params.get("seed", 0))

    @property
    def label(self) -> str:
        return label(self.preset, self.overrides)

    def without_seed(self) -> dict:
        return {k: v for k, v in self.overrides.items() if k != "seed"}

    def run_id(self, with_seed: bool = True) -> str:
        """`cpu-seed1`, `cpu-seed1-check_lr0.1` (`cpu-check_lr0.1` without the seed): a folder
        name, deterministic from the spec."""
        def slug(v):
            text = "_".join(map(slug, v)) if isinstance(v, list) else repr(v) if isinstance(v, float) \
                else str(v)
            return re.sub(r"[^A-Za-z0-9.+-]", "_", text)
        text = "-".join([self.preset] + ([f"seed{self.seed}"] if with_seed else [])
                        + [f"{k}{slug(v)}" for k, v in self.without_seed().items()])
        if len(text) > 100:  # long lists: keep it readable and unique
            import hashlib
            text = text[:80] + "-" + hashlib.sha256(text.encode()).hexdigest()[:12]
        return text

    def as_parameter(self) -> dict:
        """What the notebook receives as its `spec` parameter."""
        return {"preset": self.preset, "overrides": dict(self.overrides)}
