"""The environment decisions that could silently break numbers, and the conda environment of the rules.

`rbo` declares numpy<2 but is installed with --no-deps on numpy 2 (pyarrow needs numpy >= 2). Check
it still computes what Webber et al. (2010) define, against an independent implementation, and the
values the similarity stage relies on (legacy "RBO" = average overlap at p = 1, B-6).
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import rbo
import torch

from tests.support.helpers import GUARD, run_guarded


def _overlap(s, t, d):
    return len(set(s[:d]) & set(t[:d])) / d


def _rbo_min_reference(s, t, p):
    k = min(len(s), len(t))
    return (1 - p) * sum(p ** (d - 1) * _overlap(s, t, d) for d in range(1, k + 1))


def _average_overlap(s, t):
    k = min(len(s), len(t))
    return float(np.mean([_overlap(s, t, d) for d in range(1, k + 1)]))


def test_numpy_2_and_pinned_torch():
    assert int(np.__version__.split(".")[0]) >= 2
    assert torch.__version__.startswith("2.13.0")


@pytest.mark.parametrize("seed", range(4))
def test_rbo_on_numpy2_matches_reference(seed):
    rng = np.random.default_rng(seed)
    s = rng.permutation(30).tolist()
    t = rng.permutation(30).tolist()[:25]
    sim = rbo.RankingSimilarity(s, t)
    assert sim.rbo(p=1.0) == pytest.approx(_average_overlap(s, t), abs=1e-12)  # float64 series of ≤ 30 terms
    assert sim.rbo(p=0.9) == pytest.approx(_rbo_min_reference(s, t, 0.9), abs=1e-12)


def test_rbo_fixed_values():
    s, t = [1, 2, 3, 4, 5, 6, 7], [1, 3, 2, 4, 5, 7, 6, 8]
    # the package's own published values (float64 series of 8 terms; approx's 1e-6 relative covers their digits)
    assert rbo.RankingSimilarity(s, t).rbo(p=1.0) == pytest.approx(0.9047619047619048)
    assert rbo.RankingSimilarity(s, t).rbo(p=0.9) == pytest.approx(0.4668616)
    assert rbo.RankingSimilarity([1, 2, 3], [1, 2, 3]).rbo() == 1.0
    assert rbo.RankingSimilarity([1, 2, 3], [4, 5, 6]).rbo() == 0.0


def test_conda_post_deploy_yields_a_working_package(root, tmp_path):
    """workflow/envs/pipeline.post-deploy.sh, run in a fresh venv as Snakemake runs it in a new conda env.

    The conda channels are out of reach here, so the environment is a fresh venv that sees this
    interpreter's third-party packages (a .pth entry) but not attnlens. After the script, attnlens must
    import from the venv's own site-packages (not the checkout's src/), with its explorer assets, and
    a rule function must run.
    """
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True, capture_output=True)
    site_packages = next((env / "lib").glob("python*/site-packages"))
    deps = next(p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "torch").is_dir())
    (site_packages / "attnlens-test-deps.pth").write_text(f"{deps}\n", encoding="utf-8")
    environ = {
        **os.environ,
        "PATH": f"{env / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "ATTNLENS_SOURCE": str(root),
        "PIP_NO_BUILD_ISOLATION": "0",
        "VIRTUAL_ENV": str(env),
    }
    environ.pop("PYTHONPATH", None)
    script = root / "workflow" / "envs" / "pipeline.post-deploy.sh"
    out = run_guarded(["bash", script], cwd=tmp_path, env=environ, timeout=GUARD["plan"])  # ≤ 15 s measured
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    check = (
        "import attnlens, rbo\n"
        "from attnlens.render.explorer import _asset\n"
        "from attnlens.stats import rank_correlation\n"
        "from attnlens.pipeline.config import rule_section\n"
        "assert 'DecompressionStream' in _asset('explorer.js')\n"
        "assert abs(rank_correlation([1, 2, 3, 4], [1, 2, 4, 3], 10, 0)['spearman'] - 0.8) < 1e-12\n"
        "assert rule_section({'attribution': {'n_steps': 8}}, 'attribution').n_steps == 8\n"
        "print(attnlens.__file__)\n"
    )
    done = subprocess.run(
        [str(env / "bin" / "python"), "-c", check], cwd=tmp_path, env=environ, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert Path(done.stdout.strip()).is_relative_to(site_packages), f"attnlens imported from {done.stdout}"
