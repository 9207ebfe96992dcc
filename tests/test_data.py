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


def _copy_raw(data_dir, tmp_path):
    import shutil

    raw = tmp_path / "mnist" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for f in (data_dir / "mnist" / "MNIST" / "raw").iterdir():
        shutil.copy(f, raw / f.name)
    return raw


def test_official_files_pass_the_check(data_dir):
    from replicate.data import check_mnist_files

    names = {p.name for p in check_mnist_files(data_dir / "mnist" / "MNIST" / "raw")}
    assert {"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} <= names


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_file_is_named_by_the_check_and_the_loader(data_dir, tmp_path, damage):
    from replicate.data import DataFileError, check_mnist_files

    raw = _copy_raw(data_dir, tmp_path)
    bad = raw / "t10k-labels-idx1-ubyte.gz"
    blob = bad.read_bytes()
    bad.write_bytes(blob[:len(blob) // 2] if damage == "truncate" else b"not a gzip file at all")
    with pytest.raises(DataFileError, match="t10k-labels-idx1-ubyte.gz.*(MD5|cannot be read)"):
        check_mnist_files(raw)
    with pytest.raises(DataFileError, match="t10k-labels-idx1-ubyte.gz"):
        load_mnist(tmp_path, download=False, verbose=False)


def test_uncompressed_file_of_the_wrong_length_is_named(data_dir, tmp_path):
    import gzip

    from replicate.data import DataFileError, check_mnist_files

    raw = _copy_raw(data_dir, tmp_path)
    images = gzip.decompress((raw / "t10k-images-idx3-ubyte.gz").read_bytes())
    (raw / "t10k-images-idx3-ubyte").write_bytes(images[:-784])  # one image short: no MD5 known
    with pytest.raises(DataFileError, match="t10k-images-idx3-ubyte .*truncated"):
        check_mnist_files(raw)


def test_capacity_check_says_how_many_digits_and_where_the_training_set_goes(data_dir):
    import numpy as np

    from replicate.data import check_mnist_capacity, training_labels

    labels, source = training_labels(data_dir, download=False)
    assert source == "offline" and len(labels) == 5000
    mnist = load_mnist(data_dir, verbose=False)
    assert np.array_equal(labels, mnist.train_y.numpy())  # the labels the run would train on
    zeros = int((labels == 0).sum())
    check_mnist_capacity(n_per_class=zeros, classes=(0, 1), directory=data_dir)
    check_mnist_capacity(n_train=5000, directory=data_dir)
    with pytest.raises(ValueError, match=f"only {zeros} of digit 0.*train-images-idx3-ubyte.gz"):
        check_mnist_capacity(n_per_class=zeros + 12, classes=(0, 1), directory=data_dir)
    with pytest.raises(ValueError, match="asked for 5001 digits .* holds 5000"):
        check_mnist_capacity(n_train=5001, directory=data_dir)
