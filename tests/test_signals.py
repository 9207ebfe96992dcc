"""Ctrl-C and SIGTERM during `run`: one line on stderr, no traceback, and no staging folder,
kernel or kernel connection file left behind."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from replicate.harness import cli, execute
from replicate.runtime import PROJECT_ROOT

CHAPTER = "07_optimizers"


def _kernels(pid: int) -> list[psutil.Process]:
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    kernels = []
    for child in children:
        # A short-lived child (git, a shell) can exit, or be a zombie, between the two calls.
        try:
            if "ipykernel" in " ".join(child.cmdline()):
                kernels.append(child)
        except psutil.Error:
            continue
    return kernels


def _wait_for_kernels(proc: subprocess.Popen, seconds: float = 60) -> list[psutil.Process]:
    deadline = time.time() + seconds
    while not _kernels(proc.pid) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    kernels = _kernels(proc.pid)
    assert kernels, "the kernel never started"
    return kernels


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_cleans_up_and_says_so_in_one_line(sig, tmp_path):
    env = dict(os.environ, REPLICATE_RUNS_DIR=str(tmp_path / "runs"),
               REPLICATE_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-m", "replicate", "run", CHAPTER, "--preset", "smoke",
                             "--claims-dir", str(tmp_path / "out")], cwd=PROJECT_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        kernels = _wait_for_kernels(proc)
        staging = list(execute.STAGING_DIR.glob(f"{CHAPTER}-*-{proc.pid}-*"))
        assert len(staging) == 1 and list((staging[0] / "runtime").glob("*.json")), \
            "the kernel's connection file belongs in the staging folder"
        time.sleep(2)  # the kernel is executing cells by now
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith("warning:")]
    assert len(lines) == 1 and "interrupted" in lines[0], stderr
    assert not staging[0].exists(), "staging folder (and the kernel's connection file) left behind"
    time.sleep(1)
    assert not [k for k in kernels if _alive(k)]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_run_killed_outright_leaves_no_kernel_and_its_folder_is_swept_next_time(tmp_path):
    env = dict(os.environ, REPLICATE_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.Popen([sys.executable, "-m", "replicate", "run", CHAPTER, "--preset", "smoke",
                             "--claims-dir", str(tmp_path / "out")], cwd=PROJECT_ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        kernels = _wait_for_kernels(proc)
        proc.kill()  # SIGKILL: no handler runs
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    # the kernel watches its parent and exits when it is gone
    deadline = time.time() + 15
    while time.time() < deadline and any(_alive(k)
                                         for k in kernels):
        time.sleep(0.5)
    assert not [k for k in kernels if _alive(k)]
    left = list(execute.STAGING_DIR.glob(f"{CHAPTER}-*-{proc.pid}-*"))
    assert left, "expected the killed run's staging folder"
    execute.remove_stale_staging()
    assert not any(p.exists() for p in left)


def test_a_dead_runs_staging_folder_is_swept_by_the_next_run(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    host = execute.socket.gethostname().replace("-", "_")
    leftover = tmp_path / f"{CHAPTER}-{host}-{dead}-abc123"
    mine = tmp_path / f"{CHAPTER}-{host}-{os.getpid()}-def456"
    (leftover / "runtime").mkdir(parents=True), mine.mkdir()
    execute.remove_stale_staging(tmp_path)
    assert not leftover.exists() and mine.exists()


def test_a_signal_after_the_swap_reports_the_chapter_as_published(monkeypatch, capsys):
    # Was: SIGTERM in the publish window put the pair in place, then said "left unchanged".
    def published_then_signal(spec, claims_dir, results_dir, staging_root=None):
        execute.PUBLISHED.append(spec.chapter)  # what publish's on_done records before unblocking
        raise execute.Interrupted("SIGTERM")

    monkeypatch.setattr(execute, "PUBLISHED", [])
    monkeypatch.setattr(execute, "execute", published_then_signal)
    monkeypatch.setattr(cli, "git_commit", lambda: "0123456789ab")
    code = cli.main(["run", CHAPTER, "--preset", "smoke", "--claims-dir", "/tmp/replicate-signal-test"])
    err = capsys.readouterr().err
    assert code == 130 and "interrupted (SIGTERM)" in err
    assert f"{CHAPTER} had been published before it" in err and "left unchanged" in err
