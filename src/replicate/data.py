"""Datasets. MNIST comes from the data directory ($REPLICATE_DATA_DIR, default `data/`).

MNIST layout (torchvision's): `<data dir>/mnist/MNIST/raw/{train,t10k}-{images,labels}-idx?-ubyte[.gz]`.
- With the training files present (or downloadable), we use the standard 60,000 / 10,000 split.
- With only the official test files, we split those 10,000 digits into two disjoint halves,
  always the same ones, and say so: the chapters then train on digits from the first half and
  measure held-out accuracy on the second.
"""
from __future__ import annotations

import gzip
import os
import socket
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .runtime import data_dir, display_path

MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
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


def _read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (the MNIST format): big-endian dims after a 4-byte magic number."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = fh.read()
    ndim = raw[3]
    dims = np.frombuffer(raw, dtype=">u4", count=ndim, offset=4).astype(int)
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def _read_split(raw: Path, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = (_read_idx(_find_idx(raw, stem)) for stem in MNIST_FILES[split])
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    return x, torch.from_numpy(labels.astype(np.int64))


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

    Cheap (no reading): the CLI calls it before starting a chapter that needs MNIST.
    """
    raw = (Path(directory) if directory is not None else data_dir()) / "mnist" / "MNIST" / "raw"
    if not all(_find_idx(raw, stem) for stem in MNIST_FILES["test"]):
        raise FileNotFoundError(_missing_message(raw))
    return raw


def load_mnist(directory: str | Path | None = None, download: bool = True, verbose: bool = True) -> MNIST:
    """Load MNIST from `directory` (default: the data directory), as described above."""
    base = Path(directory) if directory is not None else data_dir()
    root = base / "mnist"
    raw = root / "MNIST" / "raw"
    have = {split: all(_find_idx(raw, s) for s in stems) for split, stems in MNIST_FILES.items()}

    if have["test"] and not have["train"] and download:
        have["train"] = _try_download(root) and all(_find_idx(raw, s) for s in MNIST_FILES["train"])

    if have["train"] and have["test"]:
        train_x, train_y = _read_split(raw, "train")
        test_x, test_y = _read_split(raw, "test")
        data = MNIST(train_x, train_y, test_x, test_y, source="standard torchvision split")
    elif have["test"]:
        x, y = _read_split(raw, "test")
        order = torch.randperm(len(y), generator=torch.Generator().manual_seed(OFFLINE_SPLIT_SEED))
        tr, te = order[:OFFLINE_TRAIN_SIZE], order[OFFLINE_TRAIN_SIZE:]
        data = MNIST(x[tr], y[tr], x[te], y[te],
                     source=f"offline split of the official MNIST test set in {display_path(raw)}")
    else:
        raise FileNotFoundError(_missing_message(raw))
    if verbose:
        note = "" if data.source.startswith("standard") else (
            " (MNIST's training files are absent, so the 10,000 official test digits were split "
            "into disjoint train / held-out halves, the same every time)")
        print(textwrap.fill(f"MNIST: {len(data.train_y)} train / {len(data.test_y)} held-out "
                            f"digits from the {data.source}{note}", width=96))
    return data


def subset(x: torch.Tensor, y: torch.Tensor, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` examples drawn without replacement, reproducibly from `seed`."""
    if n > len(y):
        raise ValueError(f"asked for {n} examples but only {len(y)} are available")
    idx = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))[:n]
    return x[idx], y[idx]
