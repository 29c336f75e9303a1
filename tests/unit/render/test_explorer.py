"""The explorer's numbers (views from bands), its compact encoding and its page, against dense references.

Bounds: the views are float32 weighted sums of band weights ≤ 1 over up to 4 layers × 3 heads, against the
float64 dense reference: float32 rounding of sums ≲ 10 (``atol=1e-5``; the received vectors, sums over ≤ 37
queries as well: ``atol=1e-4``). The page stores received attention as float16 (3 significant digits,
``rtol=atol=1e-3``); everything else it stores round-trips bit for bit (``array_equal``).
"""

import base64
import json
import zlib

import numpy as np
import pytest
import torch

from attnlens.attention.band import layer_configuration, received_attention
from attnlens.attention.layers import LAYER_CONFIGURATIONS
from attnlens.render.explorer import (
    NO_PARTNER,
    Target,
    combine_bands,
    compute_views,
    configuration_weights,
    decode_partners,
    encode_partners,
    pack_arrays,
    payload,
    read_explorer,
    render_explorer,
    unpack_arrays,
)
from tests.support.dense import dense_reference, explorer_document, random_band, reference_topk

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)

LAYOUTS = [
    # heads, n, length, window, global positions, x
    (3, 21, 17, 8, [0, 7], 2),
    (2, 14, 10, 6, [], 0),
    (2, 19, 19, 4, [0], 1),
]


def _bands(layout, n_layers=3):
    heads, n, length, window, gpos, x = layout
    return [random_band(heads, n, length, window, gpos, x, seed=10 + layer) for layer in range(n_layers)]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda c: f"n{c[1]}-g{len(c[4])}")
def test_combined_band_is_the_weighted_dense_sum(layout):
    bands = _bands(layout)
    weights = torch.rand(len(bands), bands[0].heads, generator=torch.Generator().manual_seed(0))
    combined = combine_bands(bands, weights)
    expected = sum(
        (
            weights[layer, h].double() * dense_reference(band)[h]
            for layer, band in enumerate(bands)
            for h in range(band.heads)
        ),
        torch.zeros(bands[0].n, bands[0].n, dtype=torch.float64),
    )
    assert torch.allclose(dense_reference(combined)[0], expected, atol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda c: f"n{c[1]}-g{len(c[4])}")
def test_views_match_dense_references(layout):
    bands = _bands(layout, n_layers=4)
    n_layers, heads, length = len(bands), bands[0].heads, bands[0].length
    importance = torch.rand(n_layers, heads, generator=torch.Generator().manual_seed(1))
    importance[1, 0] = 0.0  # a zero head drops out of the scaled views
    k = 3
    views = compute_views(bands, importance, k)
    assert views.received.shape == (n_layers * heads + 2 * len(LAYER_CONFIGURATIONS), bands[0].n)
    received = torch.stack([received_attention(b) for b in bands])  # (L, H, n)
    dense = torch.stack([dense_reference(b) for b in bands])  # (L, H, n, n)
    for layer in range(n_layers):
        for h in range(heads):
            v = layer * heads + h
            for name, axis in (("attended", "row"), ("attending", "column")):
                ref_idx, ref_val = reference_topk(dense[layer, h][None], k, length, axis)
                assert np.array_equal(getattr(views, f"{name}_idx")[v], ref_idx[0].numpy())
                assert np.allclose(getattr(views, f"{name}_val")[v], ref_val[0].numpy(), atol=1e-5)
    for c in views.configurations:
        weights = configuration_weights(n_layers, heads, c["layers"], importance if c["scaled"] else None)
        # received attention is the same linear combination as the overlays' layer configuration
        expected = layer_configuration(received, c["layers"], importance if c["scaled"] else None)
        assert np.allclose(views.received[c["view"]], expected.numpy(), atol=1e-4)
        mixed = (weights.double()[:, :, None, None] * dense).sum((0, 1))
        for name, axis in (("attended", "row"), ("attending", "column")):
            ref_idx, ref_val = reference_topk(mixed[None], k, length, axis)
            got_idx, got_val = getattr(views, f"{name}_idx")[c["view"]], getattr(views, f"{name}_val")[c["view"]]
            # the k largest values, and each partner really has its value (float32 sums may break ties otherwise)
            assert np.allclose(got_val, ref_val[0].numpy(), atol=1e-5)
            line = mixed.numpy() if axis == "row" else mixed.numpy().T
            for i in range(length):
                ok = got_idx[i] >= 0
                assert np.allclose(line[i, got_idx[i][ok]], got_val[i][ok], atol=1e-5)
                assert len(set(got_idx[i][ok])) == ok.sum()
    assert [(c["layers"], c["scaled"]) for c in views.configurations] == [
        (name, scaled) for name in LAYER_CONFIGURATIONS for scaled in (False, True)
    ]


def test_configuration_weights():
    imp = torch.arange(12.0).reshape(4, 3)
    w = configuration_weights(4, 3, "upper", imp)
    assert torch.equal(w[:2], torch.zeros(2, 3)) and torch.equal(w[2:], imp[2:])  # copied, not computed
    assert torch.equal(configuration_weights(4, 3, "last", None), torch.tensor([[0.0] * 3] * 3 + [[1.0] * 3]))


def test_partners_round_trip():
    rng = np.random.default_rng(0)
    views, n, k = 5, 300, 4
    idx = np.full((views, n, k), -1)
    val = np.zeros((views, n, k))
    for v in range(views):
        for i in range(n):
            m = rng.integers(0, k + 1)  # some tokens have fewer partners
            chosen = rng.choice(n, size=m, replace=False)
            vals = np.sort(rng.random(m) ** 3)[::-1]
            idx[v, i, :m], val[v, i, :m] = chosen, vals
    planes, levels, scale = encode_partners(idx, val.astype(np.float32))
    assert planes.dtype == np.uint8 and planes.shape == (2, views, k, n) and levels.shape == (views, k, n)
    got_idx, got_val = decode_partners(planes, levels, scale)
    # decoded in position order: the same partner sets, each with its own value to within the quantisation
    for v in range(views):
        for i in range(n):
            want = {int(j): float(x) for j, x in zip(idx[v, i], val[v, i], strict=True) if j >= 0}
            got = {int(j): float(x) for j, x in zip(got_idx[v, i], got_val[v, i], strict=True) if j >= 0}
            assert set(got) == set(want)
            for j, x in want.items():
                assert abs(got[j] - x) <= scale[v] * (2 * np.sqrt(x / scale[v]) / 255 + 1 / 255**2) + 1e-7


def test_partner_gaps_are_small_for_near_partners():
    idx = np.array([[[5, 3, -1], [2, 4, 6]]])  # token 0 and token 1 of one view
    val = np.array([[[0.5, 0.25, 0.0], [0.4, 0.3, 0.2]]], dtype=np.float32)
    planes, levels, _ = encode_partners(idx, val)
    gaps = planes[0].astype(np.int32) | (planes[1].astype(np.int32) << 8)
    gaps = np.where(gaps >= 1 << 15, gaps - (1 << 16), gaps)[0]  # (k, n)
    assert gaps[:, 0].tolist() == [3, 2, NO_PARTNER]  # partners 3, 5 of token 0: offset 3, then gap 2
    assert gaps[:, 1].tolist() == [1, 2, 2]  # partners 2, 4, 6 of token 1
    assert levels[0, 0, 0] == round(255 * np.sqrt(0.25 / 0.5))


def test_pack_round_trip_and_alignment():
    arrays = {
        "a": np.arange(7, dtype=np.float32),
        "b": np.array([1, -2, 3], dtype=np.int16),
        "c": np.arange(5, dtype=np.uint8).reshape(5, 1),
        "d": np.array([0.5, 65504.0, -1e-3], dtype=np.float16),
    }
    header, blob = pack_arrays(arrays)
    assert all(e["offset"] % 8 == 0 for e in header)
    raw = zlib.decompress(blob)
    assert len(raw) % 8 == 0
    out = unpack_arrays(header, blob)
    for name, a in arrays.items():
        assert out[name].dtype == a.dtype and np.array_equal(out[name], a)
    with pytest.raises(TypeError):
        pack_arrays({"x": np.zeros(2, dtype=np.float64)})


def test_page_is_self_contained_and_round_trips(tmp_path):
    # tokens that would break a naive template: placeholders, a closing script tag, quotes
    tokens = ["[CLS]", "__DATA__", "</script>", "/*__JS__*/", '"q"', "<!--", "é", "__META__", "x"]
    doc = explorer_document(tokens)
    meta, blob = payload(doc)
    page = render_explorer(meta, blob)
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    assert page.count("</script>") == 3  # meta, data, code: the token's one is escaped
    assert "http://" not in page and "https://" not in page and "src=" not in page  # nothing to fetch
    got_meta, arrays = read_explorer(path)
    assert got_meta["tokens"] == tokens and got_meta["n_tokens"] == len(tokens)
    assert np.array_equal(arrays["attribution"], doc.attribution)
    assert np.array_equal(arrays["evidence"].astype(bool), doc.evidence)
    assert np.allclose(arrays["received"].astype(np.float32), doc.views.received, rtol=1e-3, atol=1e-3)
    idx, _ = decode_partners(arrays["attended_gaps"], arrays["attended_level"], arrays["attended_scale"])
    want = doc.views.attended_idx
    for v in range(len(doc.views.received)):
        for i in range(len(tokens)):
            assert set(idx[v, i][idx[v, i] >= 0]) == set(want[v, i][want[v, i] >= 0])
    prov = json.loads(page.split('name="attnlens-provenance" content="')[1].split('"')[0].replace("&quot;", '"'))
    assert prov["git_commit"] == "abc"
    data = page.split('type="application/octet-stream">')[1].split("</script>")[0]
    assert zlib.decompress(base64.b64decode(data))  # the page's data is one deflated stream


def test_a_page_carries_every_explained_output_for_its_target_selector(tmp_path):
    tokens = ["[CLS]", "topic", "words", "here", "[SEP]"]
    doc = explorer_document(tokens)
    single, _ = payload(doc)
    assert single["targets"] == [{"name": "b", "ig_steps": 8, "ig_delta": 1e-3}]  # one output: nothing to choose
    other = Target(
        name="a",
        attribution=np.arange(5, dtype=np.float32),
        evidence=np.array([0, 1, 0, 0, 0], bool),
        ig_steps=16,
        ig_delta=2e-4,
    )
    doc.other_targets = [other, Target("c", -np.arange(5, dtype=np.float32), None, 32, 0.0)]
    meta, blob = payload(doc)
    path = tmp_path / "page.html"
    path.write_text(render_explorer(meta, blob), encoding="utf-8")
    got, arrays = read_explorer(path)
    assert [t["name"] for t in got["targets"]] == ["b", "a", "c"]  # the headline first, then in rank order
    assert [t["ig_steps"] for t in got["targets"]] == [8, 16, 32]
    assert np.array_equal(arrays["attribution"], doc.attribution)  # the headline's arrays keep their names
    assert np.array_equal(arrays["attribution_t1"], other.attribution)
    assert np.array_equal(arrays["evidence_t1"], other.evidence.astype(np.uint8))
    assert np.array_equal(arrays["attribution_t2"], -np.arange(5, dtype=np.float32)) and "evidence_t2" not in arrays
