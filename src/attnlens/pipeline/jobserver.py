"""Warm job starts: a local run's rule scripts run in forks of one process that has imported the stages already.

A job is a fresh Python process that imports torch, transformers, captum and its stage before its first line of
work: 3–7 s on a 2-core machine, as long as the work itself in a small run (docs/benchmarks.md). For a local run
of more than :data:`MIN_JOBS` jobs, the Snakefile's ``onstart`` calls :func:`start`: a job server imports every
stage module once (:func:`stage_modules`) and listens on a Unix socket whose path the jobs find in
``ATTNLENS_JOB_SERVER``. Each rule script's first line, :func:`forward`, hands its job to the server: the server
forks itself, the fork takes the script's standard streams, working directory, environment and arguments, sets
the thread pools from that environment as a fresh process would read it at start, runs the script (the same file,
the same ``snakemake`` object) and exits with its status, which the script's process exits with. The code that
runs is the job's own; only its imports are done already, so its artifacts are the same bytes
(``tests/unit/pipeline/test_jobserver.py``, and ``test_module``'s and the grid-of-one run's fresh jobs against
``tiny_run``).

What keeps a fork equal to a fresh process: the server imports and never computes, so no torch or numba thread
pool exists to be copied half-started (numpy's OpenBLAS and pyarrow's allocator, which start threads at import,
are fork-safe: they re-create them in the child). Stopping works as for a fresh job: ``SIGTERM`` to the script's
process is passed on to its fork (the job's clean stop, exit 143); a script's process that goes (killed, or its
Snakemake ended) takes its fork with it, and so does the server when it goes (each fork dies with its parent), and
the server goes when the Snakemake that started it does. Where no server answers (none started, a SLURM job, a
socket not bound yet because the server is still importing) :func:`forward` returns at once and the script runs
in its own process as before. ``ATTNLENS_WARM_JOBS=0`` switches the server off. A server that outlives one run
(``python -m attnlens.pipeline.jobserver SOCKET``, ended by closing its standard input; the test suite keeps one for its
session) serves every local run whose environment names its socket: those runs start none of their own.

Who may hand a job over: the request is plain data (JSON: the script's path, its arguments, working directory and
environment; :func:`decode_request` refuses anything else), and the server serves only its own user: it reads the
connecting process's credentials from the socket (``SO_PEERCRED``) and closes a connection from any other user
unanswered (:func:`peer_uid`). A socket in a folder others can reach, named by the user, gives them nothing to run.

Stdlib only: a script's own process imports nothing heavy before it knows where its job runs.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import ctypes
import importlib
import json
import os
import pkgutil
import runpy
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

#: The environment variable that names the server's socket (set for the jobs by :func:`start`).
SOCKET_ENV = "ATTNLENS_JOB_SERVER"
#: ``ATTNLENS_WARM_JOBS=0`` keeps every job in a fresh process of its own.
SWITCH_ENV = "ATTNLENS_WARM_JOBS"
#: A run of fewer jobs starts them fresh: the server's imports cost about two model jobs' start-up.
MIN_JOBS = 4
#: The package whose every module the server imports before it answers (:func:`stage_modules`): the model
#: stages pull in torch, transformers, captum and the numba kernels; the light ones pandas, matplotlib and scipy.
STAGES = "attnlens.stages"
#: The thread-count variables a fresh process's libraries read at start (Snakemake sets them to the job's
#: ``threads``); a fork applies them to the pools the server loaded (:func:`_limit_threads`).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: Set in a fork: the script it runs calls :func:`forward` again, which must then let it run.
_IN_FORK = False
#: A forked job's start: when its script's own process started (its start-up includes the hand-over).
JOB_STARTED: float | None = None
_HEADER = struct.Struct("!I")
#: What a script's process passes on to its fork: SIGTERM (Snakemake's and SLURM's stop), as one byte.
#: SIGINT is not passed on: a terminal's Ctrl-C reaches the fork itself (it is in the same process group).
_RELAYED = {signal.SIGTERM: b"T"}
_BY_BYTE = {byte: signum for signum, byte in _RELAYED.items()}
_PR_SET_PDEATHSIG = 1
_SERVER: tuple[subprocess.Popen, Path] | None = None


def wanted(workflow) -> bool:
    """Whether a run should start the server: Snakemake executes its jobs here (not a dry run, ``--touch`` or a
    cluster's job), on Linux (where fork semantics are known), there are more than :data:`MIN_JOBS` of them, and
    the user has not switched it off."""
    if os.environ.get(SWITCH_ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return False
    if not workflow.local_exec or workflow.dryrun or workflow.remote_exec or getattr(workflow, "touch", False):
        return False
    dag = getattr(workflow, "dag", None)
    return dag is None or len(dag) > MIN_JOBS


def answering(path: str | None) -> bool:
    """Whether a job server listens on the socket ``path`` (an empty connection, which it drops)."""
    if not path:
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def start(workflow, log: str | os.PathLike = ".snakemake/log/attnlens-jobserver.log") -> None:
    """The Snakefile's ``onstart``: start the server where :func:`wanted`, without waiting for its imports (jobs
    that come first run fresh); :func:`stop` (``onsuccess``, ``onerror``, or the process's exit) ends it. Where a
    server already answers on the socket the environment names (one kept for many runs, as the test suite keeps
    one for its whole session), the run's jobs go to that one instead."""
    global _SERVER
    if _SERVER is not None or not wanted(workflow) or answering(os.environ.get(SOCKET_ENV)):
        return
    folder = Path(tempfile.mkdtemp(prefix="attnlens-jobs-"))  # short: a socket's path has at most 107 bytes
    path = folder / "socket"
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "attnlens.pipeline.jobserver", str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    _SERVER = (proc, folder)
    os.environ[SOCKET_ENV] = str(path)
    atexit.register(stop)


def stop() -> None:
    """End the server :func:`start` started (its standard input closes; it kills any fork still running)."""
    global _SERVER
    if _SERVER is None:
        return
    proc, folder = _SERVER
    _SERVER = None
    os.environ.pop(SOCKET_ENV, None)
    end_server(proc)
    shutil.rmtree(folder, ignore_errors=True)


def end_server(proc: subprocess.Popen, timeout: float = 30) -> None:
    """End a server process (``python -m attnlens.pipeline.jobserver``): close its standard input, which it takes as
    the end
    (it kills any fork still running), and wait; kill it if it has not gone within ``timeout`` seconds."""
    with contextlib.suppress(OSError):
        proc.stdin.close()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _die_with_parent() -> None:
    """Die with SIGKILL when the process that started this one goes (Linux's prctl; elsewhere nothing)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _started() -> float:
    """When this process started (seconds since the epoch)."""
    try:
        import psutil  # noqa: PLC0415 (a light module: only the hand-over needs it)

        return psutil.Process().create_time()
    except Exception:
        return time.time()


def forward() -> None:
    """Run this rule script's job in a fork of the job server and exit with its status; return at once where
    no server answers (or inside the fork itself), so that the script runs here."""
    path = os.environ.get(SOCKET_ENV)
    if _IN_FORK or not path or os.environ.get(SWITCH_ENV) == "0":
        return
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.connect(path)
    except OSError:
        client.close()
        return
    main = sys.modules["__main__"]
    script = getattr(main, "__real_file__", None) or sys.argv[0]  # Snakemake's copy of the script, with its preamble
    request = encode_request(os.path.abspath(script), sys.argv, os.getcwd(), os.environ, _started())
    sys.stdout.flush()
    sys.stderr.flush()
    # The relay is in place before the request goes, so that a SIGTERM the moment the job starts reaches it (before,
    # it ended this process unrelayed and the server killed the job); until the request is whole, a signal waits.
    waiting: list[int] | None = []

    def relay(signum, frame) -> None:
        if waiting is not None:
            waiting.append(signum)
            return
        with contextlib.suppress(OSError):
            client.send(_RELAYED[signum])

    for signum in _RELAYED:
        signal.signal(signum, relay)
    streams = array.array("i", [0, 1, 2])
    client.sendmsg([_HEADER.pack(len(request))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, streams.tobytes())])
    client.sendall(request)
    early, waiting = waiting, None
    for signum in early:
        relay(signum, None)
    answer = _receive(client, _HEADER.size)
    # no answer: the server went away mid-job, and the job with it
    raise SystemExit(_HEADER.unpack(answer)[0] if answer else 1)


def _receive(conn: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``conn``, or fewer where it closes first."""
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def encode_request(script: str, argv: Sequence[str], cwd: str, env, started: float) -> bytes:
    """A job request as plain data: what :func:`decode_request` reads back."""
    fields = {"script": script, "argv": list(argv), "cwd": cwd, "env": dict(env), "started": started}
    return json.dumps(fields).encode()


def _strings(value) -> bool:
    """Whether ``value`` is a list of strings (a request's arguments; its environment's names and values)."""
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def decode_request(body: bytes) -> dict | None:
    """The job request in ``body``, or None where it is not one: JSON with exactly the fields
    :func:`encode_request` writes, each of its type. Nothing in a request is code the server runs to read it."""
    try:
        request = json.loads(body.decode())
    except (UnicodeDecodeError, ValueError):
        return None
    valid = (
        isinstance(request, dict)
        and set(request) == {"script", "argv", "cwd", "env", "started"}
        and isinstance(request["script"], str)
        and isinstance(request["cwd"], str)
        and _strings(request["argv"])
        and isinstance(request["env"], dict)
        and _strings(list(request["env"]) + list(request["env"].values()))
        and isinstance(request["started"], int | float)
    )
    return request if valid else None


def peer_uid(conn: socket.socket) -> int | None:
    """The user id of the process at the other end of the Unix socket ``conn`` (``SO_PEERCRED``), or None where
    the platform does not say."""
    creds = struct.Struct("3i")
    try:
        data = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, creds.size)
    except (AttributeError, OSError):
        return None
    return creds.unpack(data)[1]


def stage_modules() -> list[str]:
    """Every module of :data:`STAGES` (one per rule file): what a job's script imports."""
    package = importlib.import_module(STAGES)
    return [f"{STAGES}.{info.name}" for info in pkgutil.iter_modules(package.__path__)]


def serve(path: str, modules: Sequence[str] | None = None) -> None:
    """Import ``modules`` (default: :func:`stage_modules`), then fork a job for each request on the Unix socket
    ``path`` until standard input closes (the process that started the server has gone)."""
    # set here, not between fork and exec: Snakemake's process has threads, and a preexec_fn may deadlock there
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C stops the jobs and Snakemake; we follow
    for name in stage_modules() if modules is None else modules:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, 0o600)  # only its user may connect (the peer check below holds where the mode does not)
    listener.listen(64)
    jobs: dict[int, socket.socket] = {}  # a fork's pid → its script's connection
    try:
        while True:
            _reap(jobs)
            by_fd = {conn.fileno(): pid for pid, conn in jobs.items()}
            # a short wait: a finished fork is noticed within 20 ms (no SIGCHLD handler to race with the forks)
            readable, _, _ = select.select([sys.stdin.fileno(), listener.fileno(), *by_fd], [], [], 0.02)
            for fd in readable:
                if fd == sys.stdin.fileno():
                    if not os.read(fd, 4096):
                        return
                elif fd == listener.fileno():
                    conn, _ = listener.accept()
                    pid = _start_job(conn, listener)
                    if pid:
                        jobs[pid] = conn
                elif by_fd[fd] in jobs:  # a signal its script's process received, or that process's end
                    said = jobs[by_fd[fd]].recv(1)
                    if not said:
                        _kill(by_fd[fd])
                        jobs.pop(by_fd[fd]).close()
                    elif said in _BY_BYTE:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(by_fd[fd], _BY_BYTE[said])
    finally:
        for pid in jobs:
            _kill(pid)
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)


def _reap(jobs: dict[int, socket.socket]) -> None:
    """Tell each finished fork's script its exit status (a death by signal N as 128 + N, as a shell says it)."""
    for pid in list(jobs):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            conn = jobs.pop(pid)
            with contextlib.suppress(OSError):  # its script's process has gone already
                conn.sendall(_HEADER.pack(code if code >= 0 else 128 - code))
            conn.close()


def _start_job(conn: socket.socket, listener: socket.socket) -> int | None:
    """Read one job request from ``conn`` and fork its job; the fork's pid, or None for a request cut short, one
    that is not plain data (:func:`decode_request`), or one from another user than the server's (closed unread)."""
    if peer_uid(conn) != os.getuid():
        conn.close()
        return None
    fds = array.array("i")
    msg, ancillary, _, _ = conn.recvmsg(_HEADER.size, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    body = _receive(conn, _HEADER.unpack(msg)[0]) if len(msg) == _HEADER.size else b""
    request = decode_request(body) if body else None
    if request is None or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        conn.close()
        return None
    pid = os.fork()
    if pid == 0:
        _run_job(conn, list(fds), request, listener)
    for fd in fds:
        os.close(fd)
    return pid


def _run_job(conn: socket.socket, fds: list[int], request: dict, listener: socket.socket) -> None:
    """In the fork: become the script's process and run the script; never returns."""
    global _IN_FORK, JOB_STARTED
    code = 1
    try:
        _die_with_parent()
        listener.close()
        conn.close()
        for target, fd in zip((0, 1, 2), fds, strict=True):
            os.dup2(fd, target)
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a fresh Python
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.pop(SOCKET_ENV, None)  # what the job itself starts runs in processes of its own
        _limit_threads(os.environ)
        sys.argv = request["argv"]
        _IN_FORK, JOB_STARTED = True, request["started"]
        runpy.run_path(request["script"], run_name="__main__")
        code = 0
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:  # sys.exit("message"): printed, status 1, as Python does
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _kill(pid: int) -> None:
    """End a fork whose script has gone, and wait for it (no zombie stays)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _limit_threads(env) -> None:
    """Size the thread pools the server loaded (OpenBLAS, OpenMP) as a fresh process sizes them from ``env``."""
    counts = [int(env[name]) for name in THREAD_VARIABLES if env.get(name, "").isdigit()]
    if counts:
        from threadpoolctl import threadpool_limits  # noqa: PLC0415 (only a fork needs it)

        threadpool_limits(limits=min(counts))


def _main() -> None:
    """``python -m attnlens.pipeline.jobserver SOCKET``: serve from the module the scripts import (not ``__main__``,
    whose
    ``_IN_FORK`` they would not see)."""
    importlib.import_module("attnlens.pipeline.jobserver").serve(sys.argv[1])


if __name__ == "__main__":
    _main()
