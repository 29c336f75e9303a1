"""A rule's log holds its error: one line for bad input, the traceback for a bug."""

import subprocess
import sys
import textwrap


def _run_in_log_to(tmp_path, body: str):
    log = tmp_path / "rule.log"
    script = textwrap.dedent(f"""
        from attnlens.errors import InputError
        from attnlens.runtime import log_to
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
