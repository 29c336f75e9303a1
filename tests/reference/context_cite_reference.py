"""The ablation surrogate from its authors' code, for the parity test (tests/unit/attribution/test_surrogate.py).

Runs in the reference environment that ``tests/reference/build_context_cite_env.sh`` builds: context-cite 0.0.4
(PyPI ``context-cite``, MIT licence) with the libraries it declares, at the project's scikit-learn. It is not part
of the suite; its output is committed:

    tests/reference/build_context_cite_env.sh /tmp/cc-env
    /tmp/cc-env/bin/python tests/reference/context_cite_reference.py tests/reference/context_cite

For a few contexts (sources, ablations, keep probability, seed, answer tokens) it draws the ablation masks with
ContextCite's own loop (``_create_regression_dataset``, the masks of ``num_masks`` seeds from ``base_seed``),
makes each answer token's logit-probability ``log p − log(1 − p)`` a seeded linear function of the mask plus noise
(what a model would give; no model is needed to compare the arithmetic), and writes ``cases.json``: the masks,
those token values, ContextCite's two sequence scores (``aggregate_logit_probs``: ``logit_prob``, its default,
and ``log_prob``) and its surrogate's weights and bias (``LassoRegression().fit`` on the logit scores, as
``ContextCiter`` calls it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import sklearn
from context_cite.solver import LassoRegression
from context_cite.utils import _create_regression_dataset, aggregate_logit_probs

#: (sources, ablations, keep probability, base seed, answer tokens): ContextCite's defaults (64 ablations, ½) and
#: the ends of the issue's range (16 … 256), with more and fewer sources than ablations.
CASES = [(12, 64, 0.5, 0, 5), (40, 16, 0.5, 7, 3), (8, 256, 0.5, 1234, 9), (25, 128, 0.3, 42, 1)]


def case(n_sources: int, n_masks: int, keep: float, seed: int, n_tokens: int) -> dict:
    masks, _ = _create_regression_dataset(n_masks, n_sources, lambda mask: [1], [2] * n_tokens, keep, base_seed=seed)
    rng = np.random.default_rng(seed)
    truth = np.zeros(n_sources)
    truth[rng.choice(n_sources, size=min(3, n_sources), replace=False)] = rng.uniform(0.5, 2.0, size=min(3, n_sources))
    per_token = rng.uniform(-1.0, 1.0, size=n_tokens)
    logit_probs = (
        per_token[None, :]
        + (masks.astype(np.float64) @ truth)[:, None] / n_tokens
        - 1.0
        + rng.normal(0, 0.05, size=(n_masks, n_tokens))
    ).astype(np.float32)
    outputs = aggregate_logit_probs(logit_probs)
    weights, bias = LassoRegression().fit(masks, outputs, n_tokens)
    return {
        "n_sources": n_sources,
        "n_masks": n_masks,
        "keep": keep,
        "seed": seed,
        "n_tokens": n_tokens,
        "masks": masks.astype(int).tolist(),
        "token_logit_probs": logit_probs.tolist(),
        "logit_prob": aggregate_logit_probs(logit_probs, "logit_prob").tolist(),
        "log_prob": aggregate_logit_probs(logit_probs, "log_prob").tolist(),
        "weights": np.asarray(weights, dtype=np.float64).tolist(),
        "bias": float(bias),
    }


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "context_cite": "0.0.4",
        "scikit_learn": sklearn.__version__,
        "numpy": np.__version__,
        "cases": [case(*c) for c in CASES],
    }
    (out / "cases.json").write_text(json.dumps(record) + "\n", encoding="utf-8")
    print(f"wrote {out / 'cases.json'}: {len(CASES)} cases")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
