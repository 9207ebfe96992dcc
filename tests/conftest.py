"""Shared test setup: the data directory, and keeping tests away from the published book."""
import os
from pathlib import Path

import pytest
import torch

from replicate.runtime import PROJECT_ROOT

# The two official MNIST test files are committed under data/, so the tests run offline.
PROJECT_DATA = PROJECT_ROOT / "data"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    # Tests never write the published results or the real run cache, and never download.
    monkeypatch.setenv("REPLICATE_RESULTS_DIR", str(tmp_path / "results"))
    monkeypatch.setenv("REPLICATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("REPLICATE_NO_DOWNLOAD", "1")
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.delenv("REPLICATE_MNIST_SOURCE", raising=False)  # the default source, auto
    if "REPLICATE_DATA_DIR" not in os.environ:
        monkeypatch.setenv("REPLICATE_DATA_DIR", str(PROJECT_DATA))


@pytest.fixture
def data_dir() -> Path:
    path = Path(os.environ["REPLICATE_DATA_DIR"])
    assert (path / "mnist" / "MNIST" / "raw").is_dir(), (
        f"MNIST test files expected under {path}/mnist/MNIST/raw (set REPLICATE_DATA_DIR)")
    return path


@pytest.fixture
def one_thread():
    """For tests on tiny tensors: one thread is faster, and far faster on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
