"""Integrated-Jacobian pair attributions: closed form on a linear encoder, completeness, symmetry."""

import numpy as np
import pytest
import torch

from attnlens import pairs


def test_gauss_legendre_integrates_polynomials():
    x, w = pairs.gauss_legendre(4)
    assert w.sum() == pytest.approx(1.0) and ((x > 0) & (x < 1)).all()
    assert (w * x**7).sum() == pytest.approx(1 / 8)  # exact up to degree 2·4 − 1


def test_linear_encoder_has_the_closed_form():
    """f(h) = mean_i(h_i) W: u[i] = Δ_i W / n exactly, whatever the number of steps."""
    torch.manual_seed(0)
    w = torch.randn(5, 3, dtype=torch.float64)

    def head(h):
        return h.mean(1) @ w

    xa, ra = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    xb, rb = torch.randn(6, 5, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    res = pairs.attribute_pair(head, xa, ra, xb, rb, n_steps=1, chunk=3)
    expected = (((xa - ra) @ w) / 4) @ (((xb - rb) @ w) / 6).T
    np.testing.assert_allclose(res.matrix, expected.numpy(), rtol=1e-12)
    assert res.error == pytest.approx(0.0, abs=1e-12)


@pytest.fixture(scope="module")
def split(minilm):
    from attnlens.tokens import special_ids

    model, tokenizer = minilm
    enc = pairs.LayerSplitEncoder(model, layer=3)
    special = special_ids(tokenizer)

    def reps(text):
        ids = torch.tensor(tokenizer(text)["input_ids"])
        return enc.representation(ids), enc.representation(pairs.reference_ids(ids, tokenizer.pad_token_id, special))

    return enc, reps("Neural networks learn from data."), reps("Compilers check types of programs.")


def test_head_reproduces_the_sentence_embedding(minilm, split):
    from sentence_transformers import SentenceTransformer

    from attnlens.modeling import packaged_model_dir

    enc, (xa, _), _ = split
    reference = SentenceTransformer(str(packaged_model_dir()), device="cpu").encode(
        ["Neural networks learn from data."], convert_to_tensor=True
    )[0]
    torch.testing.assert_close(enc.head(xa[None])[0], reference, atol=1e-5, rtol=1e-4)


def test_completeness_error_shrinks_with_steps(split):
    enc, (xa, ra), (xb, rb) = split
    errors = [abs(pairs.attribute_pair(enc.head, xa, ra, xb, rb, n).error) for n in (2, 8, 20)]
    assert errors[0] > errors[1] > errors[2] and errors[2] < 2e-4


def test_swapping_the_texts_transposes_the_matrix(split):
    enc, (xa, ra), (xb, rb) = split
    ab = pairs.attribute_pair(enc.head, xa, ra, xb, rb, 4)
    ba = pairs.attribute_pair(enc.head, xb, rb, xa, ra, 4)
    np.testing.assert_allclose(ba.matrix, ab.matrix.T, rtol=1e-6, atol=1e-9)
    assert ab.score == pytest.approx(ba.score) and ab.target == pytest.approx(ba.target)


def test_reference_keeps_special_tokens():
    ids = torch.tensor([101, 7, 8, 102])
    assert pairs.reference_ids(ids, 0, {101, 102}).tolist() == [101, 0, 0, 102]
