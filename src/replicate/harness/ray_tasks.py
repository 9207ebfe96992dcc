"""Ray for the harness's many runs: start a local Ray or join a cluster (`ray_session`), run tasks
through one loop that submits, waits and cancels (`run_tasks`), and leave nothing behind.

Only Ray's public API: `ray.init` with its documented arguments, `ray.remote(...).options`,
`ray.wait`, `ray.get`, `ray.cancel`, `ray.shutdown`. A local Ray therefore starts what `ray.init`
starts (its autoscaler monitor and an API server without the web dashboard among them) and waits
for its raylet as long as Ray does (30 s; the raylet waits 15 s for its agents). On a loaded
machine that can time out, so a local start is tried twice, and what the first one left running
is killed before the second (`ray_session`: every process of a local Ray carries its id).
"""
from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

from ..config import ConfigError

MARKER = "REPLICATE_SWEEP_ID"  # set in every task's environment: finds its kernels after a Ctrl-C
RAY_INIT = dict(include_dashboard=False, log_to_driver=False, configure_logging=True,
                logging_level="ERROR")
LOGS = "/tmp/ray/session_latest/logs"
Job = TypeVar("Job")


def check_address(address: str) -> None:
    """`auto`, `ray://HOST:PORT` or `HOST:PORT` where something answers, within seconds."""
    if address == "auto":
        return
    match = re.fullmatch(r"(?:ray://)?([A-Za-z0-9._-]+|\[[0-9a-fA-F:]+\]):(\d{1,5})", address)
    if not match:
        raise ConfigError(f"--address {address!r}: write auto, HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((match[1].strip("[]"), int(match[2])), timeout=10).close()
    except OSError as err:
        why = err.strerror or err
        raise ConfigError(f"--address {address}: nothing answers there ({why}); start a cluster "
                          "with `ray start --head`, or leave out --address") from None


def start_local_ray(slots: int) -> Callable[[], None]:
    """Start a Ray here with `slots` CPU slots, without its web dashboard; returns its stop.
    A new one always (`address="local"`): without an address `ray.init` joins the last cluster
    started on this machine (`ray start`), if its address file is still there."""
    import ray
    ray.init(address="local", num_cpus=slots, **RAY_INIT)
    return ray.shutdown


def _first_line(err: BaseException) -> str:
    return (str(err).strip() or type(err).__name__).splitlines()[0][:200]


def start_ray(address: str | None, slots: int,
              start_local: Callable[[int], Callable] = start_local_ray,
              clear: Callable[[], Any] = lambda: None) -> Callable[[], None]:
    """Join `address`, or start a local Ray, tried twice (a loaded machine can time out its
    start), `clear` removing what a failed start left running; returns the stop function.
    Raises ConfigError with one line when it cannot."""
    import ray
    if address:
        check_address(address)
        try:
            ray.init(address=address, **RAY_INIT)
        except Exception as err:  # noqa: BLE001 - Ray raises many kinds; the user needs one line
            raise ConfigError(f"--address {address}: Ray could not connect "
                              f"({_first_line(err)})") from None
        return ray.shutdown
    for _ in range(2):
        try:
            return start_local(slots)
        except Exception as err:  # noqa: BLE001
            first = _first_line(err)
            ray.shutdown()  # a half-made start must not stop the second one,
            clear()  # nor its processes slow it down
    raise ConfigError(f"the local Ray did not start, twice ({first}); its logs are in {LOGS}. "
                      "Try again when the machine is less loaded, or start Ray with "
                      "`ray start --head` and pass --address auto")


def prepare_worker_environment() -> None:
    """Ray workers start from this process's environment: make sure they find this package, and
    send no usage report (`RAY_USAGE_STATS_ENABLED`, as Ray documents)."""
    src, path = str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")
    if src not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = src + (os.pathsep + path if path else "")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def kill_marked(session_id: str) -> None:
    """Kill this session's processes here: a cancelled task's kernel outlives its killed worker."""
    mark = f"{MARKER}={session_id}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):  # gone already, or not ours to read
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    os.kill(int(entry.name), signal.SIGKILL)


@dataclass
class RaySession:
    id: str              # every task sets MARKER to it, and so marks its kernels
    local: bool          # a Ray this session started (its marked processes are killed at the end)
    start_s: float = 0.0
    stop_s: float = 0.0


@contextlib.contextmanager
def ray_session(address: str | None, slots: int,
                start_local: Callable[[int], Callable] = start_local_ray) -> Iterator[RaySession]:
    """Ray for the length of a `with` block: joined at `address`, or started here with `slots`.
    A local Ray's processes inherit the session's id in their environment (MARKER), as do the
    tasks' kernels; a start that fails and, on leaving the block however it is left, the whole
    local Ray are killed by it once Ray has stopped, so nothing of the session keeps running."""
    prepare_worker_environment()
    session, started = RaySession(uuid.uuid4().hex[:12], not address), time.perf_counter()
    clear = (lambda: kill_marked(session.id)) if session.local else (lambda: None)
    before = os.environ.get(MARKER)
    if session.local:
        os.environ[MARKER] = session.id
    try:
        stop = start_ray(address, slots, start_local, clear)
    finally:  # the processes started have it; what this process starts later must not
        if before is None:
            os.environ.pop(MARKER, None)
        else:
            os.environ[MARKER] = before
    session.start_s = time.perf_counter() - started
    try:
        yield session
    finally:
        stopping = time.perf_counter()
        try:
            stop()
        finally:
            session.stop_s = time.perf_counter() - stopping
            # The kernels too: one still writing would recreate a file in a removed folder.
            clear()


def first_job(queue: list, running: list) -> int | None:
    """`run_tasks`'s default order: the jobs as given."""
    return 0


def run_tasks(jobs: list[Job], slots: int, submit: Callable[[Job], Any],
              finished: Callable[[Job, Any, float], None],
              choose: Callable[[list[Job], list[Job]], int | None] = first_job) -> None:
    """Submit each job through `submit(job)` (which returns Ray's object reference), at most
    `slots` in flight, the next one `choose(queued, running)` names (an index, or None to leave a
    slot free for now); hand each outcome to `finished(job, result, seconds since submitted)` as
    it comes: the task's return value, or the exception `ray.get` raised (a task that raised
    after Ray's retries, a worker that died). Ctrl-C cancels every task in flight (their
    workers are killed) and re-raises."""
    import ray
    queue, pending = list(jobs), {}  # pending: ref -> (job, sent)
    try:
        while queue or pending:
            while queue and len(pending) < slots:
                index = choose(queue, [job for job, _ in pending.values()])
                if index is None and pending:
                    break
                job = queue.pop(index or 0)  # with nothing running, nothing can be waited for
                pending[submit(job)] = (job, time.perf_counter())
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                job, sent = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as err:  # noqa: BLE001 - the task's failure is its result
                    result = err
                finished(job, result, time.perf_counter() - sent)
    except KeyboardInterrupt:
        for ref in pending:
            with contextlib.suppress(Exception):  # a task that already ended
                ray.cancel(ref, force=True)
        raise


def failure_text(err: BaseException, what: str) -> str:
    """One line for a task that raised: its own exception, not Ray's wrapper and traceback."""
    cause = getattr(err, "cause", None) or err  # ray.exceptions.RayTaskError keeps the cause
    text = str(cause).strip()
    return f"{what} failed: {type(cause).__name__}" + (f": {text.splitlines()[0][:300]}"
                                                        if text else "")
