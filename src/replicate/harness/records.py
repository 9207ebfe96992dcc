"""Reading the book's records (verdicts, seeds files): a file that is not whole JSON stops the
command with one line that names it, before anything is executed or written."""
from __future__ import annotations

import json
from pathlib import Path

from ..config import ConfigError
from ..runtime import display_path


def read_record(path: Path) -> dict | None:
    """The JSON object in `path`, or None when there is no such file. A truncated or garbled file,
    or one holding something other than an object, raises ConfigError naming it."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        where = f" (line {err.lineno}, column {err.colno}: {err.msg})" if isinstance(
            err, json.JSONDecodeError) else " (not UTF-8 text)"
        raise ConfigError(f"{display_path(path)} is not a readable results file{where}; restore it "
                          f"with `git checkout -- {display_path(path)}` or re-run its chapter") from None
    if not isinstance(record, dict):
        raise ConfigError(f"{display_path(path)} is not a results file: it holds a JSON "
                          f"{type(record).__name__}, not an object")
    return record
