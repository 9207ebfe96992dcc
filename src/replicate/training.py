"""One training loop for every chapter, and a cache of finished runs.

The loop knows nothing about models or measures: it calls `step(t)` (one optimisation step,
returning the loss) and, at log-spaced steps, `evaluate(t)` (returning a dict of metrics).
Chapters pass measures in through `evaluate`, so measures never import the loop.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import importlib
import json
import logging
import math
import os
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

import numpy as np
from tqdm import tqdm

from . import __version__
from .runtime import atomic_write, cache_dir, comparable_code, display_path, phase


class DivergenceError(RuntimeError):
    """The loss became NaN or infinite."""


def log_spaced_steps(total: int, count: int, include_zero: bool = True) -> list[int]:
    """About `count` distinct integer steps from 1 to `total`, evenly spaced in log scale."""
    if total < 1 or count < 1:
        raise ValueError(f"need total >= 1 and count >= 1, got total={total}, count={count}")
    steps = np.unique(np.round(np.logspace(0, math.log10(total), count)).astype(int))
    steps = [int(s) for s in steps if 1 <= s <= total]
    if steps[-1] != total:
        steps.append(total)
    return ([0] if include_zero else []) + steps


TRAINING, EVALUATION = "training steps", "evaluations during training"  # runtime.COST phases


def train_loop(step: Callable[[int], float], steps: int, eval_steps: list[int],
               evaluate: Callable[[int], dict[str, Any]], desc: str = "training") -> list[dict[str, Any]]:
    """Run `step(t)` for t = 1..steps; call `evaluate(t)` at each of `eval_steps` (0 = before training).

    Returns the evaluation history, one dict per evaluation with the key `step` and, from step 1
    on, `loss` (the training loss of that step). Stops with DivergenceError on a NaN/inf loss.
    An evaluation that returns `stop=True` (e.g. a threshold reached) ends training there; the
    `stop` key itself is not recorded.
    """
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    wanted = sorted(set(int(s) for s in eval_steps if 0 <= s <= steps))
    history = []
    if wanted and wanted[0] == 0:
        with phase(EVALUATION):
            history.append({"step": 0, **evaluate(0)})
        if history[-1].pop("stop", False):
            return history
    wanted = set(wanted)
    # mininterval keeps the bar from costing time on fast steps; TQDM_DISABLE=1 silences it.
    bar = tqdm(range(1, steps + 1), desc=desc, mininterval=1.0, leave=False)
    for t in bar:
        with phase(TRAINING):
            loss = float(step(t))
        if not math.isfinite(loss):
            bar.close()
            raise DivergenceError(
                f"{desc}: the training loss became {loss} at step {t}. Lower the learning rate, "
                f"or check the initialisation scale and the data range.")
        if t in wanted:
            with phase(EVALUATION):
                history.append({"step": t, "loss": loss, **evaluate(t)})
            bar.set_postfix(loss=f"{loss:.3g}", refresh=False)
            if history[-1].pop("stop", False):
                break
    bar.close()
    return history


PACKAGE_DIR = Path(__file__).resolve().parent
# Code that cannot change a result, as paths relative to the package (a trailing "/" names a
# folder): the harness only chooses parameters, executes notebooks and writes verdicts and pages;
# the top-level `config.py` and `verdict.py` read settings and judge results, `plotting.py` draws
# them, and `experiments/chapters/` holds each chapter's judge and figures, which read finished
# runs. Editing them must not throw away finished runs.
NOT_RESULT_CODE = ("harness/", "config.py", "verdict.py", "plotting.py", "experiments/chapters/")
CACHE_FORMAT = 3
_source_memo: dict[tuple, str] = {}


def is_result_code(relative: str) -> bool:
    """Whether the package file at `relative` (a path inside the package, with "/") can change a
    cached result, i.e. is not named by NOT_RESULT_CODE. Only the top-level config.py and
    verdict.py are excluded: a `config.py` in measures/ would be code like any other."""
    return not any(relative.startswith(entry) if entry.endswith("/") else relative == entry
                   for entry in NOT_RESULT_CODE)


def source_files(root: Path = PACKAGE_DIR) -> list[Path]:
    """The package's .py files whose code can change a cached result (see NOT_RESULT_CODE)."""
    return sorted(f for f in root.rglob("*.py") if is_result_code(f.relative_to(root).as_posix()))


def source_hash(root: Path = PACKAGE_DIR) -> str:
    """A hash of the code of every module in `source_files`, compared as it computes
    (`runtime.comparable_code`: docstrings and comments aside): an edit to what a module does
    gives a new hash, an edit to its prose does not.

    All of them, not only the modules a run happened to import: which modules are loaded when a
    run starts depends on what ran before it in the same process, and a key must not.
    Memoised on the files' names, sizes and modification times.
    """
    files = source_files(root)
    stamp = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    if stamp not in _source_memo:
        digest = hashlib.sha256()
        for f in files:
            code = comparable_code(f.read_text())
            digest.update(str(f.relative_to(root)).encode() + b"\0" + code.encode() + b"\0")
        _source_memo.clear()
        _source_memo[stamp] = digest.hexdigest()[:16]
    return _source_memo[stamp]


def code_versions() -> dict[str, str]:
    """What besides the configuration decides a run's numbers: our code and the libraries'."""
    import torch

    return {"package": __version__, "source": source_hash(), "torch": torch.__version__,
            "numpy": np.__version__}


def config_key(config: dict[str, Any], versions: dict[str, str] | None = None) -> str:
    """A short, stable hash of a run's full configuration and of the code that computes it
    (`code_versions()`: the package's source, torch and numpy)."""
    code = versions if versions is not None else code_versions()
    blob = json.dumps({"config": config, "code": code}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# --- results as data ----------------------------------------------------------------------------
# A cache folder may be shared (a cluster's filesystem), so an entry is read as data only: an npz
# archive of plain arrays, loaded without pickle, whose `header` member (JSON) says which run it
# holds and whose `layout` member (JSON) rebuilds the result around the other members. The only
# classes a layout can name are dataclasses of this package; anything else is a bad entry.

class UnstorableResult(TypeError):
    """A result holds something the cache cannot store as data (an nn.Module, a lambda, ...)."""


class BadEntry(ValueError):
    """An entry that this code will not rebuild; the message says why, for the printed line."""


# Result classes are looked up only in this package; "replicate." is how their modules start.
RESULT_PACKAGE = __name__.rpartition(".")[0]


def encode_result(result: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """(layout, arrays): a JSON-able layout of `result` and the arrays it refers to by name.

    Types kept exactly: None, bool, int, float (nan and inf too), str; list, tuple, dict and
    OrderedDict (keys of any of these types, order kept); numpy arrays and scalars; CPU copies of
    torch tensors (dtype and shape kept); dataclasses defined in this package. Anything else
    raises UnstorableResult, naming where in the result it sits.
    """
    arrays: dict[str, np.ndarray] = {}

    def keep(array: np.ndarray) -> str:
        name = f"a{len(arrays)}"
        arrays[name] = array
        return name

    def encode(x: Any, where: str) -> Any:
        kind = type(x)
        if x is None or kind in (bool, int, str):
            return x  # JSON keeps these four apart and exact
        if kind is float:
            return {"float": repr(x)}  # repr round-trips exactly, nan and inf included
        if isinstance(x, np.generic):  # before float: np.float64 is a float subclass
            if x.dtype.hasobject:
                raise UnstorableResult(f"{where} is a numpy object scalar")
            return {"numpy_scalar": keep(np.asarray(x))}
        if kind is np.ndarray:
            if x.dtype.hasobject:
                raise UnstorableResult(f"{where} is a numpy array of Python objects")
            return {"array": keep(x)}
        if _is_tensor(x):
            return _encode_tensor(x, where, keep)
        if kind in (list, tuple):
            return {kind.__name__: [encode(v, f"{where}[{i}]") for i, v in enumerate(x)]}
        if kind in (dict, OrderedDict):
            items = [[encode(k, f"a key of {where}"), encode(v, f"{where}[{k!r}]")] for k, v in x.items()]
            return {"dict" if kind is dict else "ordered_dict": items}
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            if not kind.__module__.startswith(RESULT_PACKAGE + ".") or "<locals>" in kind.__qualname__:
                raise UnstorableResult(f"{where} is a {kind.__module__}.{kind.__qualname__}, a dataclass "
                                       f"outside the {RESULT_PACKAGE} modules")
            return {"dataclass": f"{kind.__module__}:{kind.__qualname__}",
                    "fields": {f.name: encode(getattr(x, f.name), f"{where}.{f.name}")
                               for f in dataclasses.fields(x)}}
        raise UnstorableResult(f"{where} is a {kind.__module__}.{kind.__qualname__}, which the run "
                               "cache cannot store as data")

    return encode(result, "the result"), arrays


def _is_tensor(x: Any) -> bool:
    """A plain torch tensor (not a Parameter or other subclass, whose type would be lost).
    Without torch imported, nothing can be one, and the cache need not import it."""
    torch = sys.modules.get("torch")
    return torch is not None and type(x) is torch.Tensor


def _encode_tensor(t, where: str, keep: Callable[[np.ndarray], str]) -> dict:
    import torch

    if t.layout != torch.strided or t.is_quantized:
        raise UnstorableResult(f"{where} is a {t.layout} / quantized tensor; only dense tensors are stored")
    t = t.detach().cpu().resolve_conj().resolve_neg().contiguous()
    node = {"tensor": None, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape)}
    try:
        node["tensor"] = keep(t.numpy())
    except TypeError:  # bfloat16, float8, ...: no numpy dtype, so keep the bytes
        node["tensor"] = keep(t.reshape(-1).view(torch.uint8).numpy())
        node["bytes"] = True
    return node


# The kinds of node a layout holds besides None, bool, int and str (see `encode_result`).
_NODE_TAGS = frozenset({"float", "numpy_scalar", "array", "list", "tuple", "dict", "ordered_dict",
                        "tensor", "dataclass"})


def decode_result(layout: Any, array: Callable[[str], np.ndarray]) -> Any:
    """The result that `encode_result` described by `layout`, its arrays read by `array(name)`.

    Raises BadEntry for anything `encode_result` does not write, and in particular for a class
    that is not a dataclass of this package: a layout can make this code import only modules of
    this package, and call nothing but a dataclass's `__new__`.
    """
    if layout is None or type(layout) in (bool, int, str):
        return layout
    tags = _NODE_TAGS & layout.keys() if type(layout) is dict else set()
    if len(tags) != 1:
        raise BadEntry(f"its layout holds {type(layout).__name__} {str(layout)[:60]!r}")
    tag = tags.pop()
    body = layout[tag]
    if tag == "float":
        return float(str(body))
    if tag == "numpy_scalar":
        scalar = _checked_array(array(body))
        if scalar.ndim != 0:
            raise BadEntry("one of its numpy scalars is an array")
        return scalar[()]
    if tag == "array":
        return _checked_array(array(body))
    if tag in ("list", "tuple"):
        items = [decode_result(v, array) for v in _checked_list(body)]
        return items if tag == "list" else tuple(items)
    if tag in ("dict", "ordered_dict"):
        pairs = [_checked_list(p) for p in _checked_list(body)]
        if any(len(p) != 2 for p in pairs):
            raise BadEntry("its layout holds a dict item that is not a (key, value) pair")
        items = ((decode_result(k, array), decode_result(v, array)) for k, v in pairs)
        return dict(items) if tag == "dict" else OrderedDict(items)
    if tag == "tensor":
        return _decode_tensor(layout, array)
    if tag == "dataclass":
        return _decode_dataclass(str(body), layout.get("fields"), array)
    raise BadEntry(f"its layout holds an unknown node {tag!r}")


def _checked_list(body: Any) -> list:
    if type(body) is not list:
        raise BadEntry(f"its layout holds {type(body).__name__} where a list belongs")
    return body


def _checked_array(value: Any) -> np.ndarray:
    if type(value) is not np.ndarray or value.dtype.hasobject:
        raise BadEntry("one of its arrays is not a plain numpy array")
    return value


def _decode_tensor(node: dict, array: Callable[[str], np.ndarray]):
    import torch

    dtype = getattr(torch, str(node.get("dtype")), None)
    if not isinstance(dtype, torch.dtype):
        raise BadEntry(f"it names a tensor dtype {node.get('dtype')!r} that torch does not have")
    data = torch.from_numpy(_checked_array(array(node["tensor"])))
    if node.get("bytes"):
        data = data.view(dtype)
    if data.dtype != dtype:
        raise BadEntry(f"one of its tensors is {data.dtype}, its layout says {dtype}")
    return data.reshape([int(n) for n in _checked_list(node.get("shape"))])


def _decode_dataclass(spec: str, fields: Any, array: Callable[[str], np.ndarray]) -> Any:
    """An instance of the dataclass named `module:qualname`, refused unless the module is one of
    this package's. Built as pickle did (no __init__, no __post_init__), every field set."""
    module_name, _, qualname = spec.partition(":")
    if not (module_name.startswith(RESULT_PACKAGE + ".")
            and all(part.isidentifier() for part in module_name.split("."))
            and all(part.isidentifier() for part in qualname.split("."))):
        raise BadEntry(f"it names the type {spec!r}, not a result type of the {RESULT_PACKAGE} package")
    cls: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        cls = getattr(cls, part, None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise BadEntry(f"it names {spec!r}, which is not a dataclass")
    names = [f.name for f in dataclasses.fields(cls)]
    if type(fields) is not dict or sorted(fields) != sorted(names):
        raise BadEntry(f"its fields of {qualname} are not the class's ({', '.join(names)})")
    instance = cls.__new__(cls)
    for name in names:
        object.__setattr__(instance, name, decode_result(fields[name], array))  # frozen ones too
    return instance


# --- the run cache ------------------------------------------------------------------------------

# How many runs this process took from the cache and how many it computed: a chapter's recorded
# duration means little without it (a re-execution from the cache takes seconds).
CACHE_STATS = {"reused": 0, "computed": 0}
CACHE_LOG = logging.getLogger("replicate.cache")
ENTRY_SUFFIX = ".npz"
_HEADER, _LAYOUT = "header", "layout"  # the members that are not the result's arrays


def cache_entry_path(name: str, config: dict[str, Any]) -> Path:
    """Where `cached_run(name, config, ...)` keeps its entry."""
    return cache_dir() / name / f"{config_key(config)}{ENTRY_SUFFIX}"


def _config_text(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


def _json_member(value: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)


def _read_json_member(members, name: str) -> Any:
    if name not in members.files:
        raise BadEntry("it is not a run-cache entry of this format")
    raw = members[name]
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise BadEntry("it is not a run-cache entry of this format")
    return json.loads(raw.tobytes().decode("utf-8"))


def _check_header(header: Any, name: str, config: dict[str, Any], key: str) -> None:
    """Raise BadEntry unless the header says the entry is the run asked for, in this format."""
    if type(header) is not dict or header.get("format") != CACHE_FORMAT:
        raise BadEntry("it is not a run-cache entry of this format")
    if header.get("key") != key:
        raise BadEntry(f"it holds the run of {header.get('name')!r} with key {header.get('key')}, "
                       f"not {key} (moved or copied by hand?)")
    if header.get("name") != name or header.get("config") != _config_text(config):
        raise BadEntry("its recorded name or configuration differs from this run's")


def _load_entry(path: Path, name: str, config: dict[str, Any], key: str) -> tuple[bool, Any]:
    """(True, result) for an entry that is what its name says, else (False, why it is not)."""
    try:
        # Opened here, not by np.load, which leaves its own file open when a zip is damaged.
        with open(path, "rb") as fh:
            return True, _read_entry(fh, name, config, key)
    except BadEntry as err:
        return False, str(err)
    except Exception as err:  # noqa: BLE001 - truncated, garbage, a pickle, written by other code
        return False, f"it cannot be read ({type(err).__name__}: {err})"


def _read_entry(fh, name: str, config: dict[str, Any], key: str) -> Any:
    """The result in the entry open as `fh`; BadEntry if it is not the run asked for.

    The header is read and checked first; only then the layout and the arrays it names. numpy
    reads an npz member only when asked for it, and never unpickles (a pickle file is refused)."""
    members = np.load(fh, allow_pickle=False)
    if not isinstance(members, np.lib.npyio.NpzFile):
        raise BadEntry("it is not a run-cache entry of this format")
    with members:
        _check_header(_read_json_member(members, _HEADER), name, config, key)
        layout = _read_json_member(members, _LAYOUT)

        def array(member: str) -> np.ndarray:
            if member in (_HEADER, _LAYOUT) or member not in members.files:
                raise BadEntry(f"its layout refers to a missing array {str(member)[:40]!r}")
            return members[member]

        return decode_result(layout, array)


def _store_entry(path: Path, header: dict[str, Any], result: Any) -> None:
    """Write the entry to a temporary file beside `path` and rename it into place, so that an
    interrupted write never leaves a half-written entry. Raises UnstorableResult (before writing
    anything) or OSError."""
    layout, arrays = encode_result(result)
    members = {_HEADER: _json_member(header), _LAYOUT: _json_member(layout), **arrays}
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **members)
    atomic_write(path, buffer.getvalue())


def _entry_exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # an unreadable cache folder: nothing to reuse, and the write will say why
        return False


def cached_run(name: str, config: dict[str, Any], run: Callable[[], Any], verbose: bool = True) -> Any:
    """Return `run()`'s result, reusing a finished run of the same `config` and code if there is one.

    Results are stored as data (`encode_result`: arrays in an npz archive, no pickle) in
    `<cache dir>/<name>/<key>.npz`, where the key hashes `config` and `code_versions()` (the
    package's source outside NOT_RESULT_CODE, torch and numpy), so that editing an objective or a
    model never reuses a run of the old code. Each entry records its own key, name and
    configuration, checked on load before the result is rebuilt: an entry that cannot be read or
    is not the run asked for (a file renamed, copied by hand, or planted) is recomputed, with one
    printed line naming the file and the reason. Entries are written to a temporary file and
    renamed into place, so an interrupted run never leaves a half-written entry; a cache that
    cannot take the entry (a full disk, a folder that is a file, a result that is not data)
    costs one printed line, never the result. Put everything that changes the result into
    `config` (seed, steps, learning rate, ...). Set REPLICATE_NO_CACHE=1 to always recompute.
    """
    key = config_key(config)
    path = cache_dir() / name / f"{key}{ENTRY_SUFFIX}"
    if not os.environ.get("REPLICATE_NO_CACHE") and _entry_exists(path):
        ok, result = _load_entry(path, name, config, key)
        if ok:
            if verbose:  # a log line, not output: a chapter's page shows results, not its cache
                CACHE_LOG.info("%s: reusing the finished run %s from the run cache", name, path.name)
            CACHE_STATS["reused"] += 1
            return result
        print(f"{name}: recomputing the run cache entry {display_path(path)}: {result}")
    result = run()
    CACHE_STATS["computed"] += 1
    header = {"format": CACHE_FORMAT, "key": key, "name": name, "config": _config_text(config)}
    try:
        _store_entry(path, header, result)
    except (OSError, UnstorableResult) as err:
        print(f"{name}: could not store the run in the cache ({type(err).__name__}: {err}); "
              "the result is used but not kept")
    return result
