"""docs/tutorial.ipynb: stored without outputs, and every cell runs on the `.test` session run's classifier.

The notebook reads its run from ``ATTNLENS_RUN`` / ``ATTNLENS_CONFIG`` (defaults: ``results`` and
``config/config.yaml``, what ``make run`` leaves); here they point at ``tiny_run``. It is executed the way
Jupyter runs it — nbclient on an ipykernel — so a cell that fails in Jupyter fails here.
"""

from __future__ import annotations

import nbformat
import pytest
from nbclient import NotebookClient

from tests.support.helpers import GUARD, ROOT

NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"

pytestmark = pytest.mark.workflow


def test_the_notebook_is_stored_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_every_cell_runs_on_the_session_run(tiny_run, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNLENS_RUN", str(tiny_run / "results"))
    monkeypatch.setenv("ATTNLENS_CONFIG", str(tiny_run / "config/config.yaml"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb, timeout=GUARD["plan"], kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("<iframe srcdoc=" in h for h in html)  # the explorer, inline
    assert (tmp_path / "explained" / "scores.json").exists()
