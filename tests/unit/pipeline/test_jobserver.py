"""The warm job server (attnlens.pipeline.jobserver): a rule script handed to it runs as it would in its own process.

Each test starts a server that imports a few light modules (the stages' imports are what it saves, not what it
is tested by) and runs small scripts through :func:`attnlens.pipeline.jobserver.forward`, as the rule scripts do: their
streams, status, working directory, arguments and environment are the script's own; SIGTERM reaches the job; a
script killed, or a server gone, takes its job with it; thread pools follow the job's environment; and a torch
computation forked from a server that imported torch gives the bytes a fresh process gives. The pipeline's own
proof is end to end: ``test_module``'s fresh jobs against ``tiny_run``'s warm ones, byte for byte.
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from attnlens.pipeline import jobserver
from tests.support.helpers import GUARD, ROOT

SRC = str(ROOT / "src")


class Server:
    """A job server on a socket under ``folder``, importing ``modules`` (started and ended by the fixture)."""

    def __init__(self, folder: Path, modules: tuple[str, ...]):
        self.path = str(folder / "socket")
        code = f"from attnlens.pipeline import jobserver; jobserver.serve({self.path!r}, modules={modules!r})"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, env=_env(), stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + GUARD["plan"]
        while not os.path.exists(self.path):
            assert self.proc.poll() is None, self.proc.stderr.read()
            assert time.monotonic() < deadline, "the job server never bound its socket"
            time.sleep(0.05)

    def run(self, folder: Path, body: str, *args: str, env=None, wait=True, before: str = ""):
        """``body`` as a script that forwards its job first (after ``before``), started as Snakemake starts a rule
        script."""
        script = folder / "job.py"
        forwarding = "from attnlens.pipeline.jobserver import forward\nforward()\n"
        script.write_text(textwrap.dedent(before) + forwarding + textwrap.dedent(body))
        env = {**_env(), jobserver.SOCKET_ENV: self.path, **(env or {})}
        proc = subprocess.Popen(
            [sys.executable, str(script), *args],
            cwd=folder,
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        if not wait:
            return proc
        out, err = proc.communicate(timeout=GUARD["plan"])
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def close(self) -> int:
        """Close the server's standard input (its starter has gone); its exit status, after it printed nothing."""
        self.proc.stdin.close()
        code = self.proc.wait(timeout=GUARD["plan"])
        said = self.proc.stderr.read()
        assert not said, said
        return code


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC}


@pytest.fixture()
def server(tmp_path):
    server = Server(tmp_path, ("json",))
    yield server
    if server.proc.poll() is None:
        server.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ")[1][0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def _wait_for(path: Path, limit: float = GUARD["plan"]) -> str:
    deadline = time.monotonic() + limit
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.05)
    return path.read_text()


def test_a_forwarded_script_runs_in_a_fork_with_the_scripts_streams_status_and_surroundings(server, tmp_path):
    out = server.run(
        tmp_path,
        """
        import os, sys
        from attnlens.pipeline import jobserver
        print("out", os.getcwd(), sys.argv[1:], os.environ["MY_SETTING"], os.environ.get(jobserver.SOCKET_ENV))
        print("err line", file=sys.stderr)
        print("parent", os.getppid())
        sys.exit(3)
    """,
        "a b",
        env={"MY_SETTING": "x y"},
    )
    lines = out.stdout.splitlines()
    assert out.returncode == 3 and out.stderr == "err line\n"
    # its working directory, arguments and environment are the script's, and the socket is not passed further
    assert lines[0] == f"out {tmp_path} ['a b'] x y None"
    assert lines[1] == f"parent {server.proc.pid}"  # it ran in a fork of the server, not in the script's process


def test_an_exception_or_a_message_exits_as_a_fresh_process_would(server, tmp_path):
    raised = server.run(tmp_path, "raise ValueError('broken')\n")
    assert raised.returncode == 1 and raised.stderr.rstrip().endswith("ValueError: broken")
    assert "Traceback" in raised.stderr
    said = server.run(tmp_path, "import sys\nsys.exit('one line')\n")
    assert (said.returncode, said.stderr) == (1, "one line\n")
    assert server.run(tmp_path, "pass\n").returncode == 0


def test_sigterm_to_the_script_reaches_its_job(server, tmp_path):
    """What Snakemake and SLURM send to stop a job: the job's own handler runs (attnlens.pipeline.runtime's clean
    stop)."""
    proc = server.run(
        tmp_path,
        """
        import os, signal, sys, time
        def stop(signum, frame):
            print("stopped by", signal.Signals(signum).name, flush=True)
            sys.exit(143)
        signal.signal(signal.SIGTERM, stop)
        open("pid", "w").write(str(os.getpid()))
        time.sleep(600)
    """,
        wait=False,
    )
    fork = int(_wait_for(tmp_path / "pid"))
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=GUARD["plan"])
    assert (proc.returncode, out) == (143, "stopped by SIGTERM\n")
    assert not _alive(fork)


def test_a_sigterm_while_the_request_is_on_its_way_reaches_the_job(server, tmp_path):
    """A stop the moment the job starts (the script's process signalled while it sends its request) is relayed
    once the request is whole: the job ends by it and the script says so (143), where it used to end the script's
    process unrelayed (killed by the signal, -15) and leave the job to the server's clean-up."""
    before = """
        import os, signal, socket
        _sendall = socket.socket.sendall
        def sendall(self, data, *args):
            if not os.environ.get("SENT"):
                os.environ["SENT"] = "1"
                os.kill(os.getpid(), signal.SIGTERM)  # Snakemake's or SLURM's stop, mid-request
            return _sendall(self, data, *args)
        socket.socket.sendall = sendall
    """
    proc = server.run(tmp_path, "import time\ntime.sleep(600)\n", wait=False, before=before)
    proc.communicate(timeout=GUARD["plan"])
    assert proc.returncode == 143


@pytest.mark.parametrize("who", ["script", "server"])
def test_a_job_ends_with_its_script_or_its_server(server, tmp_path, who):
    """``kill -9`` of the script's process (Snakemake killed) or of the server: the fork goes too."""
    proc = server.run(
        tmp_path, "import os, time\nopen('pid', 'w').write(str(os.getpid()))\ntime.sleep(600)\n", wait=False
    )
    fork = int(_wait_for(tmp_path / "pid"))
    assert _alive(fork)
    (proc if who == "script" else server.proc).kill()
    deadline = time.monotonic() + GUARD["plan"]
    while _alive(fork):
        assert time.monotonic() < deadline, f"the job outlived its {who}"
        time.sleep(0.05)
    proc.wait(timeout=GUARD["plan"])
    if who == "server":
        assert proc.returncode == 1  # no status came back: the job did not finish
    else:
        assert server.proc.poll() is None  # the server itself carries on
        assert server.run(tmp_path, "pass\n").returncode == 0


def test_the_server_ends_when_its_starter_goes_and_takes_its_jobs(server, tmp_path):
    proc = server.run(
        tmp_path, "import os, time\nopen('pid', 'w').write(str(os.getpid()))\ntime.sleep(600)\n", wait=False
    )
    fork = int(_wait_for(tmp_path / "pid"))
    assert server.close() == 0
    assert not _alive(fork) and not os.path.exists(server.path)
    proc.wait(timeout=GUARD["plan"])


def test_without_a_server_the_script_runs_in_its_own_process(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("from attnlens.pipeline.jobserver import forward\nforward()\nimport os\nprint(os.getpid())\n")
    for env in ({}, {jobserver.SOCKET_ENV: str(tmp_path / "nobody-listens")}):
        proc = subprocess.Popen([sys.executable, str(script)], env={**_env(), **env}, stdout=subprocess.PIPE, text=True)
        out, _ = proc.communicate(timeout=GUARD["plan"])
        assert proc.returncode == 0 and int(out) == proc.pid


def test_switched_off_a_job_runs_in_its_own_process_though_a_server_answers(server, tmp_path):
    proc = server.run(tmp_path, "import os\nprint(os.getpid())\n", env={jobserver.SWITCH_ENV: "0"}, wait=False)
    out, _ = proc.communicate(timeout=GUARD["plan"])
    assert proc.returncode == 0 and int(out) == proc.pid


def test_a_run_leaves_its_jobs_to_a_server_that_already_answers(server, tmp_path, monkeypatch):
    """A server kept for many runs (the test session's, helpers.job_server) serves a run's jobs: the run starts
    none of its own; where the socket named answers nobody, the run starts its own."""
    assert jobserver.answering(server.path)
    assert not jobserver.answering(str(tmp_path / "nobody-listens")) and not jobserver.answering(None)
    monkeypatch.delenv(jobserver.SWITCH_ENV, raising=False)
    monkeypatch.setenv(jobserver.SOCKET_ENV, server.path)
    jobserver.start(_workflow())
    assert jobserver._SERVER is None and os.environ[jobserver.SOCKET_ENV] == server.path


#: A client that hands the server a request built by hand: ``argv[1]`` the socket, ``argv[2]`` the body's file; it
#: prints the status the server answers, or ``none`` where the server closed the connection unanswered.
_RAW_CLIENT = """
import array, socket, struct, sys
body = open(sys.argv[2], "rb").read()
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
client.connect(sys.argv[1])
streams = array.array("i", [0, 1, 2]).tobytes()
try:
    client.sendmsg([struct.pack("!I", len(body))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, streams)])
    client.sendall(body)
    answer = client.recv(4)
except (ConnectionResetError, BrokenPipeError):  # closed unread
    answer = b""
print(struct.unpack("!I", answer)[0] if len(answer) == 4 else "none")
"""


def _raw_request(server, body: bytes, folder: Path, python: str = sys.executable, **popen) -> str:
    (folder / "body").write_bytes(body)
    os.chmod(folder / "body", 0o644)
    done = subprocess.run(
        [python, "-c", _RAW_CLIENT, server.path, str(folder / "body")],
        cwd=folder,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=GUARD["plan"],
        **popen,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


class _Planted:
    """A pickle that, loaded, writes the file ``path``: what a pickled request could make the server run."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_a_request_is_plain_data_and_nothing_else_is_read_as_one(server, tmp_path):
    """A request the server would once have unpickled runs nothing: it is closed unanswered and the server goes on
    serving; what :func:`encode_request` writes is read back field for field, and a field of another type is not."""
    planted = tmp_path / "planted"
    assert _raw_request(server, pickle.dumps({"script": _Planted(planted)}), tmp_path) == "none"
    assert not planted.exists()
    script = tmp_path / "ok.py"
    script.write_text("import sys\nsys.exit(5)\n")
    good = jobserver.encode_request(str(script), ["ok.py"], str(tmp_path), {"PYTHONPATH": SRC}, 1.5)
    assert _raw_request(server, good, tmp_path) == "5"
    assert jobserver.decode_request(good) == {
        "script": str(script),
        "argv": ["ok.py"],
        "cwd": str(tmp_path),
        "env": {"PYTHONPATH": SRC},
        "started": 1.5,
    }
    for bad in (
        b"[]",
        b"\xff",
        good.replace(b'"ok.py"', b"1"),
        good.replace(b'"started": 1.5', b'"started": "1"'),
        good.replace(b'"cwd"', b'"extra": 0, "cwd"'),
    ):
        assert jobserver.decode_request(bad) is None, bad


#: A Python another user may run (the project's virtual environment may sit under root's home).
_SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.mark.skipif(
    os.getuid() != 0 or not os.path.exists(_SYSTEM_PYTHON),
    reason="another user's process needs root to start it and a Python outside root's home",
)
def test_a_request_from_another_user_is_refused():
    """A server on a socket in a folder everyone reaches (and a socket whose mode lets them connect, as where a
    file system ignores it): a job handed over by another user is closed unanswered and its script never runs;
    the server's own user is still served."""
    shared = Path(tempfile.mkdtemp(prefix="attnlens-shared-"))
    os.chmod(shared, 0o777)
    server = Server(shared, ("json",))
    try:
        os.chmod(server.path, 0o666)
        ran = shared / "ran"
        script = shared / "job.py"
        script.write_text(f"open({str(ran)!r}, 'w').write('ran')\n")
        os.chmod(script, 0o644)
        request = jobserver.encode_request(str(script), ["job.py"], str(shared), {"PYTHONPATH": SRC}, 0.0)
        nobody = {"user": 65534, "group": 65534, "extra_groups": []}
        assert _raw_request(server, request, shared, python=_SYSTEM_PYTHON, **nobody) == "none"
        assert not ran.exists()
        assert _raw_request(server, request, shared) == "0" and ran.read_text() == "ran"
    finally:
        server.close()
        shutil.rmtree(shared)


def test_a_forks_thread_pools_follow_the_jobs_environment(tmp_path):
    """Snakemake sets OMP_NUM_THREADS & co. to a job's ``threads``; a fresh process's OpenBLAS reads them at start,
    a fork has them applied to the pools the server loaded."""
    server = Server(tmp_path, ("numpy",))
    try:
        body = """
            from threadpoolctl import threadpool_info
            print(sorted({pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"}))
        """
        one = server.run(tmp_path, body, env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
        assert one.returncode == 0 and one.stdout == "[1]\n", one.stderr
    finally:
        server.close()


TORCH_JOB = """
    import hashlib, torch
    from transformers import LongformerConfig, LongformerForSequenceClassification
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = LongformerConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                              intermediate_size=32, max_position_embeddings=80, attention_window=4, pad_token_id=1)
    model = LongformerForSequenceClassification(config).eval()
    ids = torch.randint(2, 50, (3, 37))
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=(ids > 5).long()).logits
    print(hashlib.sha256(logits.numpy().tobytes()).hexdigest())
"""


def test_a_torch_job_forked_from_a_server_gives_a_fresh_processs_bytes(tmp_path):
    """A seeded random Longformer's padded forward, in a fresh process and in a fork of a server that imported
    torch and transformers: the same float32 bytes (the same operations on the same machine)."""
    (tmp_path / "fresh").mkdir()
    fresh = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(TORCH_JOB)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=GUARD["plan"],
    )
    assert fresh.returncode == 0, fresh.stderr
    server = Server(tmp_path, ("torch", "transformers"))
    try:
        warm = server.run(tmp_path, TORCH_JOB)
    finally:
        server.close()
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout == fresh.stdout


def _workflow(local=True, dry=False, remote=False, touch=False, jobs=41):
    return SimpleNamespace(local_exec=local, dryrun=dry, remote_exec=remote, touch=touch, dag=[None] * jobs)


def test_only_a_local_run_of_more_than_a_few_jobs_wants_the_server(monkeypatch):
    monkeypatch.delenv(jobserver.SWITCH_ENV, raising=False)
    assert jobserver.wanted(_workflow())
    assert not jobserver.wanted(_workflow(local=False))  # a cluster: jobs run elsewhere
    assert not jobserver.wanted(_workflow(dry=True))
    assert not jobserver.wanted(_workflow(remote=True))  # a cluster job's own Snakemake
    assert not jobserver.wanted(_workflow(touch=True))  # --touch runs no job
    assert not jobserver.wanted(_workflow(jobs=jobserver.MIN_JOBS))
    assert jobserver.wanted(_workflow(jobs=jobserver.MIN_JOBS + 1))
    monkeypatch.setenv(jobserver.SWITCH_ENV, "0")
    assert not jobserver.wanted(_workflow())
