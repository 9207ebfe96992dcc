"""Publishing a chapter's notebook and verdict together (harness/publish.py): whatever stops a
publication (SIGKILL at any step, a second publisher, SIGTERM, a failing copy), the book holds
the old pair or the new pair, both files, at every moment and without any repair, and what a
kill leaves beside it goes with the next publication.

The kills and the race run in child processes (a SIGKILL cannot be caught in the test's own)."""
import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from replicate.harness import publish

SRC = Path(__file__).resolve().parents[1] / "src"
# The steps of one publication of two files over plain files, in order (`_after_step` is called
# after each); a destination already linked skips the first three.
STEPS = ["linked 0", "linked 1", "adopted", "copied", "pointer swapped", "previous removed"]
PUBLISHED_AT = STEPS.index("pointer swapped")  # a kill from this step on leaves the new pair
OLD, NEW = ("old-nb", "old-json"), ("new-nb", "new-json")
MISSING = (None, None)


class Book:
    """A chapter's two destinations (claims/c.ipynb, results/c.json) and its journal."""

    def __init__(self, root: Path, old: tuple[str, str] | None = OLD, linked: bool = False):
        self.root = root
        self.notebook, self.verdict = root / "claims" / "c.ipynb", root / "results" / "c.json"
        self.journal = root / "results" / ".c.journal"
        self.pointer = root / "results" / ".c.current"
        for folder in (self.notebook.parent, self.verdict.parent):
            folder.mkdir(parents=True)
        if old and linked:  # published once already: the destinations are links
            publish.publish_together(self.sources("old"), self.journal)
        elif old:
            self.notebook.write_text(old[0]), self.verdict.write_text(old[1])

    def sources(self, tag: str) -> list[tuple[Path, Path]]:
        """New files `<tag>-nb` and `<tag>-json`, paired with their destinations as cli does."""
        folder = self.root / "staging" / tag
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "c.ipynb").write_text(f"{tag}-nb"), (folder / "c.json").write_text(f"{tag}-json")
        return [(folder / "c.json", self.verdict), (folder / "c.ipynb", self.notebook)]

    @property
    def dests(self) -> list[Path]:
        return [self.verdict, self.notebook]

    def state(self) -> tuple[str | None, str | None]:
        """(notebook text, verdict text), None for a missing file."""
        return tuple(path.read_text() if path.exists() else None
                     for path in (self.notebook, self.verdict))

    def leftovers(self) -> list[str]:
        """Everything beside the destinations but the two of them, the lock file (which stays
        on purpose: see publish.chapter_lock), the pointer and the folder it names."""
        keep = {self.notebook.name, self.verdict.name, self.journal.with_suffix(".lock").name,
                self.pointer.name}
        if self.pointer.is_symlink():
            keep.add(os.readlink(self.pointer))
        return sorted(p.name for folder in (self.notebook.parent, self.verdict.parent)
                      for p in folder.iterdir() if p.name not in keep)


# Every child starts with this: `pairs` (the new pair "new") and `journal` from its arguments.
PRELUDE = """\
import json, os, signal, sys
from pathlib import Path
from replicate.harness import publish
pairs = [(Path(src), Path(dest)) for src, dest in json.loads(sys.argv[1])]
journal = Path(sys.argv[2])
"""


def _child(code: str, book: Book, tag: str, *args: str, **popen) -> subprocess.Popen:
    """A Python process running PRELUDE + `code` to publish `book.sources(tag)`."""
    pairs = json.dumps([[str(src), str(dest)] for src, dest in book.sources(tag)])
    path = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code), pairs, str(book.journal), *args],
        env={**os.environ, "PYTHONPATH": path}, text=True, **popen)


def _finished(child: subprocess.Popen) -> tuple[int, str, str]:
    out, err = child.communicate()
    return child.returncode, out, err


KILLED_AT = """
step = sys.argv[3]
publish._after_step = lambda done: os.kill(os.getpid(), signal.SIGKILL) if done == step else None
publish.publish_together(pairs, journal)
print("survived")
"""


def test_the_swap_announces_each_of_its_steps_in_order(tmp_path, monkeypatch):
    """The kill test below covers every step only while this list is the module's."""
    book, seen = Book(tmp_path), []
    monkeypatch.setattr(publish, "_after_step", seen.append)
    publish.publish_together(book.sources("new"), book.journal)
    assert seen == STEPS
    assert book.state() == NEW and book.leftovers() == []


# (what the book holds before, the step): a pair published already (linked) is not adopted again.
KILLS = [pytest.param(old, step, id=f"{old}-{step}") for old in ("plain", "linked", "none")
         for step in STEPS if old != "linked" or STEPS.index(step) > STEPS.index("adopted")]


@pytest.mark.parametrize("then", ["repair", "publish again"])
@pytest.mark.parametrize("old, step", KILLS)
def test_a_kill_at_any_step_leaves_the_old_pair_or_the_new_pair_with_no_repair(
        tmp_path, step, old, then):
    book = Book(tmp_path, None if old == "none" else OLD, linked=old == "linked")
    code, out, err = _finished(_child(KILLED_AT, book, "new", step,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    assert code == -signal.SIGKILL, f"the child was not killed at {step!r}: {out}{err}"
    # What any reader sees now, before anything tidies up: a whole pair, old or new.
    assert book.state() == (NEW if STEPS.index(step) >= PUBLISHED_AT
                            else MISSING if old == "none" else OLD)
    left = book.leftovers()
    if then == "repair":
        message = publish.repair(book.journal)
        assert (message is None) == (left == []), f"repair said {message!r} for {left}"
        assert message is None or "\n" not in message
    else:  # a second publication of the same pair tidies first, then publishes
        publish.publish_together(book.sources("new"), book.journal)
        assert book.state() == NEW
    assert book.leftovers() == []


def test_a_publication_that_fails_after_a_kill_still_tidies_what_the_kill_left(tmp_path):
    """The run after a kill may fail itself (its chapter failed, its copy failed): the repair it
    does first must not depend on its own publication succeeding."""
    book = Book(tmp_path)
    code, out, err = _finished(_child(KILLED_AT, book, "new", "copied",
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    assert code == -signal.SIGKILL, out + err
    pairs = book.sources("next")
    pairs[0][0].unlink()
    with pytest.raises(publish.PublishError):
        publish.publish_together(pairs, book.journal)
    assert book.state() == OLD
    assert book.leftovers() == []


RACER = """
rounds = int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()  # both racers start together
failures = []
for _ in range(rounds):
    try:
        publish.publish_together(pairs, journal)
    except publish.PublishError as err:
        failures.append(str(err))
print(json.dumps(failures))
"""


def test_two_publishers_racing_for_hundreds_of_rounds_never_mix_or_lose_the_pair(tmp_path):
    """Racers A and B publish their own pair 300 times each over the same chapter, while this
    process looks at the book under the chapter's lock, as a reader that needs a whole pair."""
    book, rounds = Book(tmp_path), 300
    whole = {OLD, ("a-nb", "a-json"), ("b-nb", "b-json")}
    racers = [_child(RACER, book, tag, str(rounds), stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE) for tag in "ab"]
    for racer in racers:
        assert racer.stdout.readline() == "ready\n", racer.stderr.read()
    for racer in racers:
        racer.stdin.write("go\n"), racer.stdin.flush()
    looks, mixed, missing, stray, unlocked = 0, 0, 0, 0, 0
    while any(racer.poll() is None for racer in racers):
        with publish.chapter_lock(book.journal):
            state, left = book.state(), book.leftovers()
        looks += 1
        missing += None in state
        mixed += None not in state and state not in whole
        stray += bool(left)
        # A reader without the lock: while the pointer stays put, the two files are one pair.
        with contextlib.suppress(FileNotFoundError):
            before, state, after = os.readlink(book.pointer), book.state(), os.readlink(book.pointer)
            if before == after:
                unlocked += 1
                missing += None in state
                mixed += None not in state and state not in whole
        time.sleep(0.002)  # leave the racers most of the time (not a limit on anything)
    finished = [_finished(racer) for racer in racers]
    assert [code for code, _, _ in finished] == [0, 0], [err for _, _, err in finished]
    failures = [error for _, out, _ in finished for error in json.loads(out.splitlines()[-1])]
    counts = {"failed publications": len(failures), "looks at a mixed pair": mixed,
              "looks at a missing file": missing, "looks at temporary files": stray}
    assert counts == dict.fromkeys(counts, 0), (
        f"{counts} in {2 * rounds} publications and {looks} + {unlocked} looks; "
        f"first failures: {failures[:2]}")
    assert book.state() in whole - {OLD}
    assert book.leftovers() == []


SIGTERM_AT_THE_SWAP = """
def on_sigterm(signum, frame):
    print("signal", flush=True)
    raise KeyboardInterrupt("SIGTERM")

def sigterm_at_the_swap(done):
    if done == "pointer swapped":
        os.kill(os.getpid(), signal.SIGTERM)

signal.signal(signal.SIGTERM, on_sigterm)
publish._after_step = sigterm_at_the_swap
try:
    publish.publish_together(pairs, journal, on_done=lambda: print("done", flush=True))
except KeyboardInterrupt:
    print("interrupted", flush=True)
"""


def test_sigterm_during_the_swap_publishes_the_pair_and_says_so(tmp_path):
    """The signal waits for the swap to finish; the caller hears `on_done` before its handler
    runs, so it can report the chapter as published rather than "left unchanged"."""
    book = Book(tmp_path)
    code, out, err = _finished(_child(SIGTERM_AT_THE_SWAP, book, "new",
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    assert (code, out.split()) == (0, ["done", "signal", "interrupted"]), err
    assert book.state() == NEW
    assert book.leftovers() == []


@pytest.mark.parametrize("failure", ["missing source", "disk full on the second copy"])
def test_a_failed_copy_leaves_the_old_pair_and_no_temporary_files(tmp_path, monkeypatch, failure):
    book = Book(tmp_path)
    pairs = book.sources("new")
    if failure == "missing source":
        pairs[1][0].unlink()
    else:
        real, copies = shutil.copyfileobj, []  # what publish copies with

        def second_copy_fails(source, out, *args):
            copies.append(out)
            if len(copies) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(source, out, *args)

        monkeypatch.setattr(publish.shutil, "copyfileobj", second_copy_fails)
    with pytest.raises(publish.PublishError) as raised:
        publish.publish_together(pairs, book.journal)
    assert "\n" not in str(raised.value)
    assert book.state() == OLD
    assert book.leftovers() == []


@pytest.mark.parametrize("old", [OLD, None], ids=["over an old pair", "first publication"])
def test_a_failed_swap_of_the_pointer_leaves_the_old_pair(tmp_path, monkeypatch, old):
    book = Book(tmp_path, old)
    real = os.replace

    def pointer_swap_fails(src, dest):
        if Path(dest) == book.pointer and "adopted" in seen:
            raise PermissionError(errno.EACCES, "Permission denied", str(dest))
        return real(src, dest)

    seen = []
    monkeypatch.setattr(publish, "_after_step", seen.append)
    monkeypatch.setattr(publish.os, "replace", pointer_swap_fails)
    with pytest.raises(publish.PublishError, match="Permission denied"):
        publish.publish_together(book.sources("new"), book.journal)
    assert book.state() == (old or MISSING)
    assert book.leftovers() == []
