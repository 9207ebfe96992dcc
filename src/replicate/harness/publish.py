"""Put an executed chapter's notebook and its verdict into the book together: the old pair or the
new, never a mix or a missing file, whatever cuts it off, and no reader ever needs a repair.

A chapter's published files live in one folder per publication, `.<chapter>.v-<random>/`, beside
its results file; one symbolic link, `.<chapter>.current`, names the folder in force, and each
destination (`results/<chapter>.json`, `claims/<chapter>.ipynb`) is a fixed link through it. A
publication, under the chapter's lock:
1. tidy: remove the folders and links of publications that a kill cut off (never the current one);
2. adopt: the first time, move plain destination files into a folder of their own and make the
   destinations links through the pointer (each step shows the old pair);
3. copy the new files into a new folder, flushed to disk;
4. swap the pointer to the new folder with one rename: this is the moment the new pair is
   published, and the only one;
5. remove the previous folder.
Ctrl-C, SIGTERM and SIGHUP are held across 4 and 5, so only SIGKILL or a crash cuts it short, and
what they leave is an unreferenced folder that the next publication removes."""
import contextlib
import fcntl
import os
import secrets
import shutil
import signal
from pathlib import Path
from typing import Callable, Iterable, Iterator

HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
# Test hook, called with each step's name once it is done, so that tests can kill the process.
_after_step: Callable[[str], None] = lambda step: None


class PublishError(RuntimeError):
    """The pair could not be put in place; the old pair stands."""


def publish_together(pairs: list[tuple[Path, Path]], journal: Path,
                     on_done: Callable[[], None] | None = None) -> None:
    """Copy each src to its dest, all or none. `journal` names the chapter's lock and pointer
    (`<folder>/.<chapter>.journal`: `.lock` and `.current` beside it). Raises PublishError, the
    old pair in place, if anything fails before the pointer moves. Calls `on_done` after it,
    before held signals are let through, so that a caller whose signal handler raises still
    knows that the pair was published."""
    pairs = [(Path(src), Path(dest).absolute()) for src, dest in pairs]
    journal, dests = Path(journal).absolute(), [dest for _, dest in pairs]
    pointer = _pointer(journal)
    with contextlib.ExitStack() as stack:  # unwinds last in, first out: signals, then the lock
        with _reported("cannot take the lock: "):
            stack.enter_context(chapter_lock(journal))
        with _reported("cannot tidy an earlier publication: "):
            _tidy_locked(journal)  # step 1
        with _reported("cannot link the destinations: "):
            _adopt_locked(journal, dests)  # step 2
            _after_step("adopted")
        new = pointer.with_name(f"{_stem(journal)}.v-{secrets.token_hex(4)}")
        with _reported(undo=lambda: shutil.rmtree(new, ignore_errors=True)):
            new.mkdir()
            for number, (src, dest) in enumerate(pairs):
                _copy(src, new / _slot(number, dest))
            _fsync_dirs([new])
            _after_step("copied")
            stack.callback(signal.pthread_sigmask, signal.SIG_SETMASK,  # let through at the end
                           signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS))
            previous = _current(pointer)
            _link(new.name, pointer)  # step 4: from here on, the new pair is the published one
            _fsync_dirs([pointer.parent])
        _after_step("pointer swapped")
        try:
            if on_done is not None:
                on_done()
        finally:  # a folder that cannot be removed is left for the next publication's tidy
            if previous is not None:
                shutil.rmtree(previous, ignore_errors=True)
            _after_step("previous removed")


def repair(journal: Path) -> str | None:
    """Under the lock: remove what publications cut off by a kill left beside the chapter (its
    pair is whole already); returns a line saying what it removed, or None."""
    with chapter_lock(journal):
        return _tidy_locked(Path(journal).absolute())


def adopt(journal: Path, dests: Iterable[Path]) -> None:
    """Under the lock: make the destinations links through the chapter's pointer (step 2 alone),
    in the order a publication pairs them; their content is unchanged."""
    with chapter_lock(journal):
        _adopt_locked(Path(journal).absolute(), [Path(dest).absolute() for dest in dests])


@contextlib.contextmanager
def chapter_lock(journal: Path) -> Iterator[None]:
    """Hold the chapter's lock, as writers of its page do. Its file is never removed: one
    waiting on a removed file would hold a lock that the next one, on a new file, does not see."""
    path = Path(journal).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:  # closing it releases the lock
        fcntl.flock(lock, fcntl.LOCK_EX)  # retried by Python if a signal interrupts the wait
        yield


def _stem(journal: Path) -> str:
    return journal.name[:-len(".journal")] if journal.name.endswith(".journal") else journal.name


def _pointer(journal: Path) -> Path:
    return journal.with_name(f"{_stem(journal)}.current")


def _slot(number: int, dest: Path) -> str:
    return f"{number}-{dest.name}"


def _current(pointer: Path) -> Path | None:
    return pointer.parent / os.readlink(pointer) if pointer.is_symlink() else None


def _link(target: str, path: Path) -> None:
    """Make `path` a symbolic link to `target` in one rename, whatever it was before."""
    temporary = path.with_name(f".{path.name}.link-{os.getpid()}-{secrets.token_hex(4)}")
    os.symlink(target, temporary)
    try:
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)
        raise


def _adopt_locked(journal: Path, dests: list[Path]) -> None:
    """Make each destination a link through the pointer, keeping what it shows: plain files (a
    book published before links, a first publication) move into a folder of their own first."""
    pointer = _pointer(journal)
    links = {dest: os.path.relpath(pointer / _slot(number, dest), dest.parent)
             for number, dest in enumerate(dests)}
    if all(dest.is_symlink() and os.readlink(dest) == target for dest, target in links.items()):
        return
    held = pointer.with_name(f"{_stem(journal)}.v-{secrets.token_hex(4)}")
    held.mkdir()
    current = _current(pointer)
    try:
        for number, dest in enumerate(dests):  # what each destination shows now, as it is
            if dest.exists():
                _copy(dest, held / _slot(number, dest))
        _fsync_dirs([held])
        _link(held.name, pointer)  # the same pair: nothing points through it yet but these
    except BaseException:
        shutil.rmtree(held, ignore_errors=True)
        raise
    for number, (dest, target) in enumerate(links.items()):
        dest.parent.mkdir(parents=True, exist_ok=True)
        _link(target, dest)
        _after_step(f"linked {number}")
    _fsync_dirs({pointer.parent, *(dest.parent for dest in dests)})
    if current is not None:
        shutil.rmtree(current, ignore_errors=True)


def _tidy_locked(journal: Path) -> str | None:
    """Remove the chapter's folders that the pointer does not name and any temporary link, for a
    caller holding the lock (which makes them a dead publisher's)."""
    pointer = _pointer(journal)
    current = _current(pointer)
    stem = _stem(journal)
    strays = [p for p in pointer.parent.glob(f"{stem}.v-*") if current is None or p != current]
    strays += list(pointer.parent.glob(f".{stem}.current.link-*"))
    for path in strays:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if not strays:
        return None
    return (f"removed {len(strays)} leftover(s) of a publication that was cut off "
            f"({', '.join(sorted(p.name for p in strays))})")


def _copy(src: Path, dest: Path) -> None:
    """Copy `src` (its bytes, times and mode) to the new file `dest`, flushed to disk."""
    with open(src, "rb") as source, open(dest, "xb") as out:
        shutil.copyfileobj(source, out)
        out.flush()
        os.fsync(out.fileno())
    shutil.copystat(src, dest)


def _fsync_dirs(folders: Iterable[Path]) -> None:
    """Make renames, creations and removals in these folders survive a crash."""
    for folder in dict.fromkeys(folders):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _reported(what: str = "", undo: Callable[[], object] = lambda: None) -> Iterator[None]:
    """On a failure in the block, `undo`; then raise an OSError as a one-line PublishError."""
    def describe(err: BaseException) -> str:
        return " ".join(f"{type(err).__name__}: {err}".split())
    try:
        yield
    except BaseException as err:
        undo()
        if isinstance(err, OSError):
            raise PublishError(what + describe(err)) from None
        raise
