import hashlib

import pytest
import torch

from replicate.data import load_mnist, require_mnist, subset


def test_offline_split_shapes_labels_and_disjointness(data_dir):
    mnist = load_mnist(data_dir)
    assert mnist.train_x.shape == (5000, 784) and mnist.test_x.shape == (5000, 784)
    assert mnist.train_x.dtype == torch.float32
    assert 0.0 <= mnist.train_x.min() and mnist.train_x.max() <= 1.0
    for y in (mnist.train_y, mnist.test_y):
        counts = torch.bincount(y, minlength=10)
        assert len(counts) == 10 and counts.min() > 350  # every digit well represented
    assert len(mnist.train_y) + len(mnist.test_y) == 10_000
    # Disjoint: no image of the held-out half appears in the training half.
    train_rows = {row.numpy().tobytes() for row in (mnist.train_x * 255).round().to(torch.uint8)}
    test_rows = [row.numpy().tobytes() for row in (mnist.test_x * 255).round().to(torch.uint8)]
    assert sum(r in train_rows for r in test_rows) <= 2  # MNIST has a handful of exact duplicates
    assert "offline split" in mnist.source


def test_same_split_every_time(data_dir):
    a, b = load_mnist(data_dir, verbose=False), load_mnist(data_dir, verbose=False)
    assert torch.equal(a.train_x, b.train_x) and torch.equal(a.test_y, b.test_y)


def test_loader_says_what_it_used(data_dir, capsys):
    load_mnist(data_dir)
    assert "held-out" in capsys.readouterr().out


def test_empty_directory_error_names_the_path_and_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        load_mnist(tmp_path)
    message = str(err.value)
    assert str(tmp_path / "mnist" / "MNIST" / "raw") in message
    assert "t10k-images-idx3-ubyte" in message and "REPLICATE_DATA_DIR" in message


def test_subset_is_reproducible_and_without_replacement():
    x, y = torch.arange(100.0).unsqueeze(1), torch.arange(100)
    xa, ya = subset(x, y, 30, seed=1)
    xb, _ = subset(x, y, 30, seed=1)
    assert torch.equal(xa, xb) and len(set(ya.tolist())) == 30
    with pytest.raises(ValueError, match="only 100"):
        subset(x, y, 101, seed=0)


def test_require_mnist_is_cheap_and_names_the_folder(data_dir, tmp_path):
    assert require_mnist(data_dir) == data_dir / "mnist" / "MNIST" / "raw"
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        require_mnist(tmp_path)


def test_committed_mnist_files_are_the_official_test_set():
    # The MD5s torchvision verifies when it downloads MNIST's test set.
    from replicate.runtime import PROJECT_ROOT

    official = {"t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
                "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c"}
    raw = PROJECT_ROOT / "data" / "mnist" / "MNIST" / "raw"
    for name, md5 in official.items():
        assert hashlib.md5((raw / name).read_bytes()).hexdigest() == md5, name
