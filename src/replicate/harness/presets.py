"""Chapters and their presets (`smoke`, `cpu`, `paper`), with validation.

Each chapter has a folder `presets/<chapter>/` holding `chapter.yaml` (title, claim, which
parameters must be positive, which datasets it needs, e.g. `datasets: [mnist]`, and
`shape_only:`, the overrides that cut the `paper` preset down to a run of minutes) and one YAML
file per preset. `chapter.yaml` also declares what is checked before a notebook starts:
`ranges:` (`{train_fraction: "(0, 1)"}`, brackets closed, parentheses open, applied to every
item of a list), `choices:` (the allowed values), `rules:` between parameters (`- require:` a
Python expression over the parameter names, `because:` the reason shown when it fails) and
`data_needs:` (how many MNIST training digits the parameters ask for).
The `cpu` preset is the schema: it names every parameter and fixes its type, and the notebook's `parameters` cell repeats it, so a
plain re-execution of a chapter reproduces the published book.
"""
from __future__ import annotations

import ast
import json
import math
import os
import shlex
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
    ranges: tuple[tuple[str, str], ...] = field(default=())  # name, interval such as "(0, 1]"
    choices: tuple[tuple[str, tuple], ...] = field(default=())  # name, allowed values
    rules: tuple[tuple[str, str], ...] = field(default=())  # expression, reason
    data_needs: tuple[tuple[str, Any], ...] = field(default=())  # see check_data

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
                                     seed_note=meta.get("seed_note", ""),
                                     ranges=tuple((meta.get("ranges") or {}).items()),
                                     choices=tuple((k, tuple(v)) for k, v in
                                                   (meta.get("choices") or {}).items()),
                                     rules=tuple((r["require"], r.get("because", ""))
                                                 for r in meta.get("rules") or ()),
                                     data_needs=tuple((meta.get("data_needs") or {}).items()))
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
    if isinstance(value, str):
        number = _scalar(value)
        is_number = isinstance(number, (int, float)) and not isinstance(number, bool)
        return number if is_number else value
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


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ", ".join(_format_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_format_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def example(name: str, template: Any) -> str:
    """A command-line setting of `name` that parses to a value of `template`'s type."""
    if isinstance(template, list) and template and not isinstance(template[0], (list, dict)):
        text = ",".join(_format_value(v) for v in template)
    else:
        text = _format_value(template)
    return f"-p {name} {shlex.quote(text)}"


def _type_name(value: Any) -> str:
    if isinstance(value, list):
        inner = sorted({_type_name(v) for v in value}) or ["any"]
        return f"list of {'/'.join(inner)}"
    return type(value).__name__


def _coerce(name: str, value: Any, template: Any, top: tuple[str, Any] | None = None) -> Any:
    """Return `value` in the type of `template`, or raise ConfigError (with an example)."""
    top = top or (name, template)

    def fail():
        raise ConfigError(f"parameter {name!r} must be of type {_type_name(template)} "
                          f"(cpu preset: {template!r}); got {value!r} ({_type_name(value)}). "
                          f"For example: {example(*top)}")

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
            return [_coerce(f"{name}[{i}]", v, template[0], top) for i, v in enumerate(value)]
        return value
    if isinstance(template, dict):
        if not isinstance(value, dict):
            fail()
        return value
    raise ConfigError(f"parameter {name!r} has an unsupported type in the cpu preset")


def _numbers(value: Any) -> list:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    return []


def _in_interval(x: float, interval: str) -> bool:
    lo_closed, hi_closed = interval.strip()[0] == "[", interval.strip()[-1] == "]"
    lo, hi = (float(t) for t in interval.strip()[1:-1].split(","))
    return (lo <= x if lo_closed else lo < x) and (x <= hi if hi_closed else x < hi)


RULE_FUNCTIONS = {"min": min, "max": max, "len": len, "all": all, "any": any, "set": set,
                  "sorted": sorted, "abs": abs, "sum": sum}


def _rule_names(expression: str) -> set[str]:
    """The parameter names a rule reads (not its functions, nor the variables it binds itself)."""
    nodes = [n for n in ast.walk(ast.parse(expression, mode="eval")) if isinstance(n, ast.Name)]
    bound = {n.id for n in nodes if isinstance(n.ctx, ast.Store)}
    return {n.id for n in nodes} - bound - set(RULE_FUNCTIONS)


def _check_rule(chapter: str, expression: str, because: str, params: dict[str, Any]) -> None:
    names = sorted(_rule_names(expression))
    shown = ", ".join(f"{n}={params[n]!r}" for n in names)
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
    numbers, signs (`positive:`), `ranges:`, `choices:` and, for the rules whose parameters are
    all in `params`, the `rules:` between parameters. Raises ConfigError."""
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
    for name in ch.positive:
        value = checked.get(name)
        if value is not None and any(v <= 0 for v in _numbers(value)):
            raise ConfigError(f"parameter {name!r} must be positive; got {value!r}")
    for name, interval in ch.ranges:
        value = checked.get(name)
        if value is not None and not all(_in_interval(v, interval) for v in _numbers(value)):
            raise ConfigError(f"parameter {name!r} must lie in {interval}; got {value!r}")
    for name, allowed in ch.choices:
        value = checked.get(name)
        values = value if isinstance(value, list) else [value]
        if value is not None and any(v not in allowed for v in values):
            raise ConfigError(f"parameter {name!r} must be one of {', '.join(map(str, allowed))}; "
                              f"got {value!r}")
    for expression, because in ch.rules:
        if _rule_names(expression) <= set(checked):
            _check_rule(chapter, expression, because, checked)
    return checked


def check_data(chapter: str, params: dict[str, Any]) -> None:
    """The data a run of `chapter` with the full parameter set `params` reads: present, readable
    (each MNIST file opened and checked against its MD5 / header) and large enough
    (`data_needs:` in chapter.yaml: `n_train: <parameter>` for that many training digits,
    `n_per_class: <parameter>` with `classes: [...]` for that many of each class). Takes seconds;
    raises ConfigError naming the file or saying how many digits there are."""
    ch = get_chapter(chapter)
    if "mnist" not in ch.datasets:
        return
    from .. import data

    try:
        data.check_mnist_files(data.require_mnist())
        needs = dict(ch.data_needs)
        if needs:
            data.check_mnist_capacity(
                n_train=params.get(needs["n_train"]) if "n_train" in needs else None,
                n_per_class=params.get(needs["n_per_class"]) if "n_per_class" in needs else None,
                classes=tuple(needs.get("classes", range(10))))
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(f"chapter {chapter} needs MNIST. {err}") from None


def preflight(chapter: str, preset: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything about a run's parameters and data that can be checked before its notebook
    starts: the preset with `overrides` on top, validated (including the rules between
    parameters, which need the full set), then `check_data`. Returns the full parameters."""
    params = resolve(chapter, preset, overrides)
    check_data(chapter, params)
    return params


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
