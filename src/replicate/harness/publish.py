"""Put an executed chapter's notebook and its verdict into the book together: the old pair or the
new, never a mix or a missing file, whatever cuts it off. A publication, under the chapter's lock:
1. repair: undo a publication that a kill cut off (see `repair`);
2. copy each new file and each old one beside its destination, flushed to disk;
3. write the journal atomically: each destination's incoming file and previous copy (or null);
4. rename every incoming file onto its destination;
5. remove the journal: this is the moment the new pair is published;
6. remove the previous copies.
After a kill before 5 the next repair puts every old file back; after 5 it removes the copies.
Ctrl-C, SIGTERM and SIGHUP are held from 3 to 6, so only SIGKILL or a crash cuts the swap. All
publishers of a destination use one journal: the lock tells repair nobody alive owns a temp file."""
import contextlib
import fcntl
import io
import json
import os
import secrets
import shutil
import signal
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple

HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
_Entry = NamedTuple("_Entry", [("dest", Path), ("incoming", Path), ("previous", Path | None)])
# Test hook, called with each step's name once it is done, so that tests can kill the process.
_after_step: Callable[[str], None] = lambda step: None


class PublishError(RuntimeError):
    """The pair could not be put in place; the old pair stands (the message says if not yet)."""


def publish_together(pairs: list[tuple[Path, Path]], journal: Path,
                     on_done: Callable[[], None] | None = None) -> None:
    """Copy each src to its dest, all or none. Raises PublishError, the old pair in place, if
    anything fails before step 5. Calls `on_done` after it, before held signals are let through,
    so that a caller whose signal handler raises still knows that the pair was published."""
    pairs = [(Path(src), Path(dest).absolute()) for src, dest in pairs]
    journal, dests, entries = Path(journal).absolute(), [dest for _, dest in pairs], []
    with contextlib.ExitStack() as stack:  # unwinds last in, first out: signals, then the lock
        with _reported("cannot take the lock: "):
            stack.enter_context(chapter_lock(journal))
        with _reported("an interrupted publication could not be undone: "):
            _repair_locked(journal, dests)  # step 1
        with _reported(undo=lambda: _repair_locked(journal, dests)):  # what a failure leaves
            for src, dest in pairs:
                dest.parent.mkdir(parents=True, exist_ok=True)
                entries.append(_Entry(dest, _stage(dest, "incoming", src),
                                      _stage(dest, "previous", dest) if dest.exists() else None))
            _fsync_dirs(dest.parent for dest in dests)
            _after_step("copied")
            stack.callback(signal.pthread_sigmask, signal.SIG_SETMASK,  # let through at the end
                           signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS))
            record = json.dumps({"pairs": [e._asdict() for e in entries]}, indent=1, default=str)
            os.replace(_stage(journal, "writing", record.encode()), journal)  # whole or none
            _fsync_dirs([journal.parent])
            _after_step("journal written")
            for number, entry in enumerate(entries):
                os.replace(entry.incoming, entry.dest)
                _after_step(f"renamed {number}")
            _fsync_dirs(dest.parent for dest in dests)  # the renames stick before step 5
            journal.unlink()  # from here on, the new pair is the published one
        with contextlib.suppress(OSError):  # published already: only durability is at stake
            _fsync_dirs([journal.parent])
        _after_step("journal removed")
        try:
            if on_done is not None:
                on_done()
        finally:  # a previous copy that cannot be removed is left for the next repair
            _remove(entry.previous for entry in entries if entry.previous)
            _after_step("previous removed")


def repair(journal: Path, dests: Iterable[Path] = ()) -> str | None:
    """Under the lock: roll back a swap that `journal` records, remove dead publishers' temporary
    files of `dests` (a journal names its own); returns a line saying what it did, or None."""
    with chapter_lock(journal):
        return _repair_locked(Path(journal).absolute(), [Path(dest).absolute() for dest in dests])


@contextlib.contextmanager
def chapter_lock(journal: Path) -> Iterator[None]:
    """Hold the chapter's lock, as readers of a whole pair do. Its file is never removed: one
    waiting on a removed file would hold a lock that the next one, on a new file, does not see."""
    path = Path(journal).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:  # closing it releases the lock
        fcntl.flock(lock, fcntl.LOCK_EX)  # retried by Python if a signal interrupts the wait
        yield


def _repair_locked(journal: Path, dests: list[Path]) -> str | None:
    """`repair` for a caller holding the lock, which makes any temporary file a dead publisher's."""
    done = []
    if journal.exists():  # cut off before step 5: put every old file back, whichever renames
        entries = [_Entry(**{key: path and Path(path) for key, path in item.items()})
                   for item in json.loads(journal.read_text())["pairs"]]
        for entry in entries:
            if entry.previous is None:
                entry.dest.unlink(missing_ok=True)
            elif entry.previous.exists():  # else a repair cut off itself had moved it back
                os.replace(entry.previous, entry.dest)
        _fsync_dirs(entry.dest.parent for entry in entries)
        _remove(entry.incoming for entry in entries)
        journal.unlink()  # last, so that a repair cut off is done again in full by the next one
        _fsync_dirs([journal.parent])
        dests = [*dests, *(entry.dest for entry in entries)]
        names = " and ".join(entry.dest.name for entry in entries)
        done.append(f"put back the old {names} of a publication that was cut off")
    kinds = [(journal, "writing")] + [(d, k) for d in dests for k in ("incoming", "previous")]
    found = set()
    for d, k in kinds:  # a missing folder holds no temporary file
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            found |= {p for p in d.parent.iterdir() if p.name.startswith(f".{d.name}.{k}-")}
    _remove(found)
    if strays := [path for path in found if not os.path.lexists(path)]:
        done.append(f"removed {len(strays)} temporary file(s) of a publisher that died "
                    f"({', '.join(sorted(path.name for path in strays))})")
    return "; ".join(done) or None


def _stage(dest: Path, kind: str, content: Path | bytes) -> Path:
    """Put `content` (these bytes, or a copy of this file with its times and mode) in a new file
    `.<name>.<kind>-<pid>-<random>` beside `dest`, never one that exists, flushed to disk."""
    with open(content, "rb") if isinstance(content, Path) else io.BytesIO(content) as source:
        while True:  # the source is opened first: a missing one leaves nothing behind
            path = dest.with_name(f".{dest.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}")
            with contextlib.suppress(FileExistsError), open(path, "xb") as out:  # taken: try again
                shutil.copyfileobj(source, out)
                out.flush()
                os.fsync(out.fileno())
                break
    if kind == "previous":  # so that putting it back restores the file as it was
        shutil.copystat(content, path)
    return path


def _fsync_dirs(folders: Iterable[Path]) -> None:
    """Make renames, creations and removals in these folders survive a crash."""
    for folder in dict.fromkeys(folders):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove(paths: Iterable[Path]) -> None:
    """Remove the files that can be removed; one that cannot is left for the next repair."""
    for path in paths:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def _reported(what: str = "", undo: Callable[[], object] = lambda: None) -> Iterator[None]:
    """On a failure in the block, `undo`; then raise an OSError as a one-line PublishError."""
    def describe(err: BaseException) -> str:
        return " ".join(f"{type(err).__name__}: {err}".split())
    try:
        yield
    except BaseException as err:
        try:
            undo()
        except OSError as also:
            said = f"{describe(err)}; putting the old pair back failed too ({describe(also)})"
            raise PublishError(f"{said}: the next publication or repair() will") from None
        if isinstance(err, OSError):
            raise PublishError(what + describe(err)) from None
        raise
