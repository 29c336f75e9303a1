"""A rule's log holds its error: one line for bad input, the traceback for a bug."""

import subprocess
import sys
import textwrap


def _run_in_log_to(tmp_path, body: str):
    log = tmp_path / "rule.log"
    script = textwrap.dedent(f"""
        from attnlens.errors import InputError
        from attnlens.pipeline.runtime import log_to
        with log_to({str(log)!r}):
    """) + textwrap.indent(textwrap.dedent(body), "    ")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    return out, log.read_text(encoding="utf-8")


def test_bad_input_is_one_line_in_the_log_and_on_the_terminal(tmp_path):
    out, log = _run_in_log_to(tmp_path, 'raise InputError("notes.csv", "label", "expected integer class labels")')
    line = "attnlens: error: notes.csv: label: expected integer class labels"
    assert out.returncode == 1
    assert out.stderr.strip() == line and log.strip() == line
    assert "Traceback" not in out.stderr + log


def test_a_bug_leaves_its_traceback_in_the_log(tmp_path):
    """Snakemake's --show-failed-logs shows the rule's log: an empty one hides the error."""
    out, log = _run_in_log_to(tmp_path, "import numpy as np\nnp.isfinite(np.array(['x'], dtype=object))")
    assert out.returncode == 1
    assert "Traceback" in log and "TypeError: ufunc 'isfinite' not supported" in log
    assert "TypeError" in out.stderr  # and on the terminal, as any uncaught exception


def test_a_stop_that_lands_in_a_finaliser_still_stops_the_job(tmp_path):
    """SIGTERM's handler runs at the main thread's next bytecode; where that is a ``__del__`` (here the regex
    module's, in CI, as the garbage collector ran it), Python prints the exception and drops it. The job must stop
    anyway, with its one line and status 143, and not run on to its end as though never stopped."""
    out, log = _run_in_log_to(
        tmp_path,
        """
        import signal
        import time

        class Finalised:
            def __del__(self):
                signal.raise_signal(signal.SIGTERM)  # its handler runs here, inside the finaliser

        Finalised()
        for _ in range(200):  # two seconds of work: the stop, sent again, lands in it
            time.sleep(0.01)
        print("ran on to its end")
        """,
    )
    assert out.returncode == 143, out.stdout + out.stderr
    assert "ran on to its end" not in out.stdout
    assert "attnlens: stopped: SIGTERM received" in log and "Traceback" not in log + out.stderr


def test_kernels_leave_torch_on_the_threads_it_was_given():
    """A fresh process (numba's OpenMP layer not started yet): after the compiled kernels of a band and of a full
    layer, torch still computes on the one thread it was given. Starting numba's layer sets the process's
    OpenMP count to every core, which torch would read (a one-thread job's IG then differed by 6e-10)."""
    code = textwrap.dedent("""
        import torch

        torch.set_num_threads(1)  # before numba is imported, as a user of attnlens.explain may
        from attnlens.attention.band import Band, received_attention, topk_attended
        from attnlens.attention.full import FullLayer, summaries

        seen = [torch.get_num_threads()]
        band = Band(torch.rand(2, 16, 5), None, 16, torch.zeros(0, dtype=torch.long))
        topk_attended(band, 3)
        seen.append(torch.get_num_threads())
        received_attention(band)
        summaries(FullLayer(torch.rand(2, 16, 4), torch.rand(2, 16, 4), 16), 3)
        seen.append(torch.get_num_threads())
        print(seen)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[1, 1, 1]"
