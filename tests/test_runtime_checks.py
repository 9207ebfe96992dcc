"""Checks made before a chapter's kernel starts: quick, without torch, one line on failure."""
import os
import shutil
import subprocess
import sys
import tempfile
from collections import namedtuple

import pytest

from replicate.runtime import check_cache_dir


def _one_line(err) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    return message


def test_data_module_and_its_pre_run_checks_do_not_load_torch():
    # A child process: this one has torch loaded already (conftest imports it).
    script = (
        "import sys\n"
        "import replicate.data as d\n"
        "import replicate.runtime as r\n"
        "imported = 'torch' in sys.modules\n"
        "d.check_mnist_files(d.require_mnist())\n"
        "d.check_mnist_capacity(n_train=5000)\n"
        "d.check_mnist_capacity(n_per_class=300, classes=(0, 1))\n"
        "try:\n"
        "    d.check_mnist_capacity(n_train=5001)\n"
        "except ValueError:\n"
        "    pass\n"
        "r.check_cache_dir()\n"
        "print(imported, 'torch' in sys.modules, 'torchvision' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "False"], result.stdout


def test_cache_folder_that_is_missing_is_created(tmp_path, monkeypatch):
    folder = tmp_path / "deep" / "cache"
    monkeypatch.setenv("REPLICATE_CACHE_DIR", str(folder))
    check_cache_dir()
    assert folder.is_dir()
    assert list(folder.iterdir()) == []  # the write check leaves nothing behind


def test_cache_folder_that_is_a_regular_file_is_refused_in_one_line(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("REPLICATE_CACHE_DIR", str(blocker))
    with pytest.raises(OSError) as err:
        check_cache_dir()
    message = _one_line(err)
    assert str(blocker) in message and "is a file, not a folder" in message
    assert "REPLICATE_CACHE_DIR" in message


def test_cache_folder_under_a_regular_file_cannot_be_created(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("REPLICATE_CACHE_DIR", str(blocker / "runs"))
    with pytest.raises(OSError) as err:
        check_cache_dir()
    message = _one_line(err)
    assert str(blocker / "runs") in message and "cannot be created" in message


def test_cache_folder_that_cannot_be_written_is_refused_in_one_line(tmp_path, monkeypatch):
    # Tests run as root, who writes into a folder without write permission: the write itself is
    # made to fail as it does for an ordinary user (or on a read-only disk).
    folder = tmp_path / "cache"
    folder.mkdir()
    monkeypatch.setenv("REPLICATE_CACHE_DIR", str(folder))

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(OSError) as err:
        check_cache_dir()
    message = _one_line(err)
    assert str(folder) in message and "not writable: Permission denied" in message


def test_cache_folder_on_a_full_disk_is_refused_in_one_line(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("REPLICATE_CACHE_DIR", str(folder))
    mib = 1024 ** 2
    usage = namedtuple("usage", "total used free")  # the fields shutil.disk_usage answers with
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(1000 * mib, 950 * mib, 50 * mib))
    with pytest.raises(OSError) as err:
        check_cache_dir(min_free_mb=200)
    message = _one_line(err)
    assert str(folder) in message and "50 MB free" in message and "200 MB" in message
    check_cache_dir(min_free_mb=50)  # exactly enough is enough


def test_cache_folder_with_room_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLICATE_CACHE_DIR", str(tmp_path / "cache"))
    check_cache_dir(min_free_mb=1)
    if os.geteuid() != 0:  # an ordinary user cannot write into a read-only folder
        (tmp_path / "cache").chmod(0o500)
        with pytest.raises(OSError, match="not writable"):
            check_cache_dir(min_free_mb=1)
