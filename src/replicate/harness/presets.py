"""Chapters and their presets (`smoke`, `cpu`, `paper`), with validation.

Each chapter has a folder `presets/<chapter>/` holding `chapter.yaml` (title, claim, which
parameters must be positive, which datasets it needs, e.g. `datasets: [mnist]`, and
`shape_only:`, the overrides that cut the `paper` preset down to a run of minutes) and one YAML
file per preset. The `cpu` preset is the schema: it
names every parameter and fixes its type, and the notebook's `parameters` cell repeats it, so a
plain re-execution of a chapter reproduces the published book.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..runtime import NOTEBOOKS_DIR, PRESETS_DIR

SCHEMA_PRESET = "cpu"
SHAPE_ONLY_BASE = "paper"
OVERRIDES_ENV = "REPLICATE_OVERRIDES"  # JSON list of parameter names the CLI set on purpose


class ConfigError(ValueError):
    """Bad chapter, preset or parameter; raised before anything is computed."""


@dataclass(frozen=True)
class Chapter:
    name: str
    title: str
    claim: str
    presets: tuple[str, ...]
    positive: tuple[str, ...] = field(default=())
    datasets: tuple[str, ...] = field(default=())  # checked by the CLI before a run starts
    # Overrides on top of `paper` that keep its models, data sizes and measurement settings but
    # cut step counts, repetitions and snapshots to a handful (`run --shape-only`).
    shape_only: tuple[tuple[str, Any], ...] = field(default=())
    seed_note: str = ""  # what the `seed` parameter does and does not vary, shown across seeds

    @property
    def notebook(self) -> Path:
        return NOTEBOOKS_DIR / f"{self.name}.ipynb"


def _read_yaml(path: Path) -> dict:
    with open(path) as fh:
        data = yaml.safe_load(fh) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of names to values")
    return data


def chapters() -> dict[str, Chapter]:
    """Every chapter that has a `chapter.yaml`, in book order."""
    found = {}
    for meta_path in sorted(PRESETS_DIR.glob("*/chapter.yaml")):
        meta = _read_yaml(meta_path)
        folder = meta_path.parent
        presets = tuple(sorted(p.stem for p in folder.glob("*.yaml") if p.stem != "chapter"))
        found[folder.name] = Chapter(name=folder.name, title=meta["title"], claim=meta["claim"],
                                     presets=presets, positive=tuple(meta.get("positive", ())),
                                     datasets=tuple(meta.get("datasets", ())),
                                     shape_only=tuple((meta.get("shape_only") or {}).items()),
                                     seed_note=meta.get("seed_note", ""))
    return found


def get_chapter(name: str) -> Chapter:
    known = chapters()
    if name not in known:
        raise ConfigError(f"unknown chapter {name!r}; valid chapters: {', '.join(known) or '(none)'}")
    return known[name]


def load_preset(chapter: str, preset: str) -> dict[str, Any]:
    ch = get_chapter(chapter)
    if preset not in ch.presets:
        raise ConfigError(f"unknown preset {preset!r} for chapter {chapter}; "
                          f"valid presets: {', '.join(ch.presets)}")
    return _read_yaml(PRESETS_DIR / chapter / f"{preset}.yaml")


def parse_value(text: str) -> Any:
    """Read a command-line value: `20000` is an int, `1e-3` a float, `[0.1, 0.2]` a list."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    # YAML for lists and booleans; note YAML alone would read `1e-3` as a string.
    value = yaml.safe_load(text)
    return text if value is None else value


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        inner = sorted({_type_name(v) for v in value}) or ["any"]
        return f"list of {'/'.join(inner)}"
    return type(value).__name__


def _coerce(name: str, value: Any, template: Any) -> Any:
    """Return `value` in the type of `template`, or raise ConfigError."""
    def fail():
        raise ConfigError(f"parameter {name!r} must be of type {_type_name(template)} "
                          f"(cpu preset: {template!r}); got {value!r} ({_type_name(value)})")

    if isinstance(template, bool):
        if not isinstance(value, bool):
            fail()
        return value
    if isinstance(template, int):
        if isinstance(value, bool) or not isinstance(value, int):
            fail()
        return value
    if isinstance(template, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            fail()
        return float(value)
    if isinstance(template, str):
        if not isinstance(value, str):
            fail()
        return value
    if isinstance(template, list):
        if not isinstance(value, list):
            fail()
        if template:
            return [_coerce(f"{name}[{i}]", v, template[0]) for i, v in enumerate(value)]
        return value
    if isinstance(template, dict):
        if not isinstance(value, dict):
            fail()
        return value
    raise ConfigError(f"parameter {name!r} has an unsupported type in the cpu preset")


def validate(chapter: str, params: dict[str, Any]) -> dict[str, Any]:
    """Check names, types and signs of `params` against the chapter's cpu preset."""
    ch = get_chapter(chapter)
    schema = load_preset(chapter, SCHEMA_PRESET)
    unknown = sorted(set(params) - set(schema))
    if unknown:
        raise ConfigError(f"unknown parameter(s) {', '.join(unknown)} for chapter {chapter}; "
                          f"valid parameters: {', '.join(schema)}")
    checked = {name: _coerce(name, value, schema[name]) for name, value in params.items()}
    for name in ch.positive:
        value = checked.get(name)
        values = value if isinstance(value, list) else [value]
        if value is not None and any(v <= 0 for v in values):
            raise ConfigError(f"parameter {name!r} must be positive; got {value!r}")
    return checked


def resolve(chapter: str, preset: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The full parameter set: the preset's values with `overrides` on top, validated."""
    params = dict(load_preset(chapter, preset))
    params.update(validate(chapter, overrides or {}))
    return validate(chapter, params)


def from_notebook(chapter: str, preset: str, namespace: dict[str, Any]) -> tuple[dict, dict]:
    """Turn a notebook's parameter variables into (params, overrides).

    The `parameters` cell holds the cpu values. A variable still equal to its cpu value takes
    the chosen preset's value; any other value is an override. So `papermill -p preset smoke`
    runs the smoke preset, and `-p preset smoke -p steps 500` the smoke preset with 500 steps.
    A name listed in $REPLICATE_OVERRIDES (set by the CLI) is an override even at its cpu value.
    """
    schema = load_preset(chapter, SCHEMA_PRESET)
    chosen = load_preset(chapter, preset)
    missing = [name for name in schema if name not in namespace]
    if missing:
        raise ConfigError(f"the notebook's parameters cell lacks {', '.join(missing)}")
    # Names the CLI passed on purpose count even when equal to their cpu value.
    explicit = set(json.loads(os.environ.get(OVERRIDES_ENV) or "[]"))
    overrides = {name: namespace[name] for name in schema
                 if namespace[name] != schema[name] or name in explicit}
    overrides = {k: v for k, v in validate(chapter, overrides).items() if v != chosen.get(k)}
    return resolve(chapter, preset, overrides), overrides


def shape_only(chapter: str) -> dict[str, Any]:
    """The `shape_only` overrides of a chapter (applied on top of the `paper` preset), validated."""
    ch = get_chapter(chapter)
    if not ch.shape_only:
        raise ConfigError(f"chapter {chapter} has no shape_only overrides in its chapter.yaml")
    if SHAPE_ONLY_BASE not in ch.presets:
        raise ConfigError(f"chapter {chapter} has shape_only overrides but no {SHAPE_ONLY_BASE} preset")
    overrides = validate(chapter, dict(ch.shape_only))
    resolve(chapter, SHAPE_ONLY_BASE, overrides)  # the cut-down paper preset must itself be valid
    return overrides
