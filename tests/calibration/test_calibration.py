"""Tests of the calibration pass (h = diag(X^T X)) and of the model zoo (hscale.models)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from hscale import calibration as C  # noqa: E402
from hscale import models as M  # noqa: E402
from hscale.demo import default_layer as D  # noqa: E402
from hscale.models import synthetic as S  # noqa: E402

from helpers.paths import REPO_ROOT


# ------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------


def xtx_diag(rows) -> np.ndarray:
    """The independent computation: diag(X^T X) in numpy float64."""
    x = np.asarray(rows, dtype=np.float64)
    return np.diag(x.T @ x).copy()


def all_pre_hooks(model):
    return {name: len(mod._forward_pre_hooks) for name, mod in model.named_modules()}


def make_mlp(seed=0):
    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(32, 48), nn.ReLU(), nn.Linear(48, 16), nn.Tanh(), nn.Linear(16, 8))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    return model.eval()


def mlp_layer_inputs(model, x):
    """Inputs of the three Linear layers of make_mlp, computed by hand (no hooks)."""
    with torch.no_grad():
        a0 = x
        a2 = model[1](model[0](a0))
        a4 = model[3](model[2](a2))
    return {"0": a0, "2": a2, "4": a4}


# ------------------------------------------------------------------------------------------
# (a) h equals an independent X^T X, padding excluded
# ------------------------------------------------------------------------------------------


def test_h_matches_numpy_xtx_with_padding_excluded():
    model = make_mlp()
    g = torch.Generator().manual_seed(1)
    x1 = torch.randn(3, 5, 32, generator=g)
    mask1 = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    x1[mask1 == 0] = 1e3  # padding positions hold garbage that must not leak into h
    x2 = torch.randn(4, 32, generator=g)  # a plain tensor batch: every row counts

    h = C.collect_hessian_diag(model, [C.CalibrationBatch(x1, mask1), x2], progress=False)
    assert list(h) == ["0", "2", "4"]

    ins1, ins2 = mlp_layer_inputs(model, x1), mlp_layer_inputs(model, x2)
    for name in h:
        rows = np.concatenate([ins1[name][mask1.bool()].numpy(), ins2[name].numpy()])
        expected = xtx_diag(rows)
        assert h[name].dtype == np.float64 and h[name].shape == (model.get_submodule(name).in_features,)
        np.testing.assert_allclose(h[name], expected, rtol=1e-12, atol=0, err_msg=name)


def test_full_hessian_matches_numpy_xtx_and_leaves_h_unchanged():
    model = make_mlp()
    g = torch.Generator().manual_seed(1)
    x1 = torch.randn(3, 5, 32, generator=g)
    mask1 = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    x1[mask1 == 0] = 1e3  # padding must not leak into H either
    batches = [C.CalibrationBatch(x1, mask1)]

    H, h_full = C.collect_hessian(model, batches, progress=False)
    h = C.collect_hessian_diag(model, batches, progress=False)
    ins = mlp_layer_inputs(model, x1)
    for name in h:
        x = ins[name][mask1.bool()].numpy().astype(np.float64)
        np.testing.assert_allclose(H[name], x.T @ x, rtol=1e-12, atol=1e-12, err_msg=name)
        assert np.array_equal(H[name], H[name].T), name
        assert np.array_equal(h_full[name], h[name]), name  # full mode never changes h
    with pytest.raises(RuntimeError, match="full=True"):
        C.HessianDiagCollector(model).hessian()


def test_padded_batch_equals_unpadded_sequences():
    model = make_mlp()
    g = torch.Generator().manual_seed(2)
    lengths = [6, 2, 4]
    seqs = [torch.randn(1, n, 32, generator=g) for n in lengths]
    padded = torch.full((3, 6, 32), -7.0)
    mask = torch.zeros(3, 6, dtype=torch.long)
    for i, s in enumerate(seqs):
        padded[i, : s.shape[1]] = s[0]
        mask[i, : s.shape[1]] = 1
    stats = {}
    h_pad = C.collect_hessian_diag(model, [C.CalibrationBatch(padded, mask)], progress=False, stats=stats)
    h_seq = C.collect_hessian_diag(model, seqs, progress=False)
    assert stats["tokens"] == {"0": 12, "2": 12, "4": 12}
    # layer 0 sees the raw inputs: equal up to summation order. Deeper layers see fp32 GEMM
    # outputs, whose rounding depends on the batch shape (blocking), hence the looser rtol.
    np.testing.assert_allclose(h_pad["0"], h_seq["0"], rtol=1e-12)
    for name in ("2", "4"):
        np.testing.assert_allclose(h_pad[name], h_seq[name], rtol=1e-5, err_msg=name)
    # and without the mask the padding would have counted
    h_unmasked = C.collect_hessian_diag(model, [padded], progress=False)
    assert not np.allclose(h_unmasked["0"], h_pad["0"])


class KwargsModel(nn.Module):
    """Takes Hugging Face style keyword batches; the Linear sees [batch, seq, 16]."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 16)
        self.proj = nn.Linear(16, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, input_ids, attention_mask=None):
        return self.head(torch.relu(self.proj(self.emb(input_ids))))


def test_mapping_batch_takes_mask_from_attention_mask():
    torch.manual_seed(0)
    model = KwargsModel().eval()
    ids = torch.tensor([[1, 2, 3, 4], [5, 6, 0, 0]])
    am = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    h = C.collect_hessian_diag(model, [{"input_ids": ids, "attention_mask": am}], progress=True)
    assert list(h) == ["proj", "head"]
    with torch.no_grad():
        e = model.emb(ids)
        p = torch.relu(model.proj(e))
    np.testing.assert_allclose(h["proj"], xtx_diag(e[am.bool()].numpy()), rtol=1e-12)
    np.testing.assert_allclose(h["head"], xtx_diag(p[am.bool()].numpy()), rtol=1e-12)
    # mask_key=None counts every position
    h_all = C.collect_hessian_diag(model, [{"input_ids": ids, "attention_mask": am}], progress=False, mask_key=None)
    np.testing.assert_allclose(h_all["proj"], xtx_diag(e.reshape(-1, 16).numpy()), rtol=1e-12)


def test_h_is_accumulated_in_float64():
    # x_j^2 summed in fp32 would lose the small terms next to a huge one; fp64 keeps them.
    lin = nn.Linear(16, 1)
    model = nn.Sequential(lin)
    x = torch.ones(4, 16)
    x[0, 0] = 2.0**12  # x^2 = 2^24: adding 1.0 in fp32 is lost
    h = C.collect_hessian_diag(model, [x], progress=False)
    assert h["0"][0] == 2.0**24 + 3.0
    assert np.all(h["0"][1:] == 4.0)


def test_layers_argument_forms():
    model = make_mlp()
    x = torch.randn(2, 3, 32)
    by_name = C.collect_hessian_diag(model, [x], layers=["4", "0"], progress=False)
    assert list(by_name) == ["4", "0"]
    by_pair = C.collect_hessian_diag(model, [x], layers=[("first", model[0])], progress=False)
    np.testing.assert_array_equal(by_pair["first"], by_name["0"])
    with pytest.raises(TypeError, match="not nn.Linear"):
        C.collect_hessian_diag(model, [x], layers=["1"], progress=False)


def test_unused_layer_warns_and_gets_zero():
    model = make_mlp()
    extra = nn.Linear(16, 16)
    with pytest.warns(RuntimeWarning, match="never ran"):
        h = C.collect_hessian_diag(model, [torch.randn(2, 32)], layers=[("extra", extra), ("0", model[0])], progress=False)
    assert np.all(h["extra"] == 0) and np.any(h["0"] > 0)


def test_mask_that_does_not_line_up_is_rejected():
    class TruncateThenProject(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(16, 16)

        def forward(self, x):
            return self.proj(x[:, :2])  # [batch, 2, n] against a [batch, 3] mask: no token order

    model = TruncateThenProject()
    with pytest.raises(ValueError, match=r"'proj'.*does not line up"):
        C.collect_hessian_diag(model, [C.CalibrationBatch(torch.randn(2, 3, 16), torch.ones(2, 3))], progress=False)
    assert all(n == 0 for n in all_pre_hooks(model).values())


def test_one_vector_per_sequence_counts_every_row():
    # A pooler sees [batch, n] (the [CLS] row of each sequence): the token mask says nothing
    # about it, so every row counts, padding or not.
    class PoolThenProject(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(16, 16)

        def forward(self, x):
            return self.proj(x[:, 0])

    x = torch.randn(2, 3, 16)
    mask = torch.tensor([[1, 0, 0], [1, 1, 0]])
    h = C.collect_hessian_diag(PoolThenProject(), [C.CalibrationBatch(x, mask)], progress=False)
    pooled = x[:, 0].double().numpy()
    np.testing.assert_array_equal(h["proj"], (pooled * pooled).sum(axis=0))


# ------------------------------------------------------------------------------------------
# (b) hooks are always removed; no autograd graph
# ------------------------------------------------------------------------------------------


class Boom(RuntimeError):
    pass


class ExplodingModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x):
        self.a(x)
        raise Boom("forward failed after the first Linear")


def test_hooks_removed_when_forward_raises():
    model = ExplodingModel()
    user_handle = model.a.register_forward_pre_hook(lambda mod, args: None)  # not ours: must stay
    before = all_pre_hooks(model)
    with pytest.raises(Boom):
        C.collect_hessian_diag(model, [torch.randn(2, 16)], progress=True)
    assert all_pre_hooks(model) == before
    user_handle.remove()
    assert all(n == 0 for n in all_pre_hooks(model).values())


def test_hooks_removed_after_normal_call_and_no_grad():
    model = make_mlp()
    seen_grad_mode = []
    model[0].register_forward_hook(lambda mod, args, out: seen_grad_mode.append(torch.is_grad_enabled()))
    before = all_pre_hooks(model)
    C.collect_hessian_diag(model, [torch.randn(2, 32)], progress=False)
    assert all_pre_hooks(model) == before
    assert seen_grad_mode == [False]
    # the context-manager form as well
    with C.HessianDiagCollector(model) as col:
        assert sum(all_pre_hooks(model).values()) == 3
        out = col.run_batch(torch.randn(1, 32))
        assert not out.requires_grad
    assert all_pre_hooks(model) == before


# ------------------------------------------------------------------------------------------
# (c) MiniLM: offline load, 36 Linear layers, sane h
# ------------------------------------------------------------------------------------------

MINILM_SUFFIXES = [
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "intermediate.dense",
    "output.dense",
]
MINILM_NAMES = [f"encoder.layer.{i}.{s}" for i in range(6) for s in MINILM_SUFFIXES]


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("transformers")
    pytest.importorskip(M.MINILM_MODULE, reason=f"needs the package {M.MINILM_PACKAGE}")
    return M.load_minilm()


def test_minilm_loads_offline_with_36_linear_layers(minilm):
    model, tokenizer = minilm
    assert not model.training
    assert next(model.parameters()).dtype == torch.float32
    layers = M.linear_layers(model)
    assert [n for n, _ in layers] == MINILM_NAMES
    assert all(mod.in_features in (384, 1536) for _, mod in layers)
    assert not hasattr(model, "pooler") or model.pooler is None


def test_minilm_calibration_small(minilm):
    model, tokenizer = minilm
    texts = C.calibration_texts()[:8]
    batches = C.minilm_calibration_batches(tokenizer, texts, batch_size=4, max_length=32)
    assert len(batches) == 2
    n_real = sum(int(b["attention_mask"].sum()) for b in batches)
    assert any(int((b["attention_mask"] == 0).sum()) > 0 for b in batches)  # there is padding
    stats = {}
    h = C.collect_hessian_diag(model, batches, progress=False, stats=stats)
    assert list(h) == MINILM_NAMES
    for name, mod in M.linear_layers(model):
        v = h[name]
        assert v.dtype == np.float64 and v.shape == (mod.in_features,), name
        assert np.all(np.isfinite(v)) and np.all(v >= 0), name
        assert np.any(v > 0), name
        assert stats["tokens"][name] == n_real, name
    # query, key and value read the same input
    np.testing.assert_array_equal(h["encoder.layer.0.attention.self.query"], h["encoder.layer.0.attention.self.value"])

    # padding excluded: one sequence at a time (no padding at all) gives the same h up to
    # floating-point noise of the forward pass
    h_single = C.collect_hessian_diag(
        model, C.minilm_calibration_batches(tokenizer, texts, batch_size=1, max_length=32), progress=False
    )
    for name in MINILM_NAMES:
        np.testing.assert_allclose(h[name], h_single[name], rtol=1e-4, atol=1e-6 * h[name].max(), err_msg=name)


def test_minilm_dir_and_missing_package_message(monkeypatch):
    pytest.importorskip(M.MINILM_MODULE)
    assert (M.minilm_model_dir() / "model.safetensors").is_file()
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == M.MINILM_MODULE else real_find_spec(name, *a))
    with pytest.raises(ImportError, match=re.escape(M.MINILM_PACKAGE)):
        M.minilm_model_dir()


# ------------------------------------------------------------------------------------------
# (d) the tiny decoder
# ------------------------------------------------------------------------------------------

TINY_NAMES = [
    f"model.layers.{i}.{s}"
    for i in range(2)
    for s in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
] + ["lm_head"]


@pytest.fixture(scope="module")
def tiny_pair():
    pytest.importorskip("transformers")
    return S.build_tiny_decoder(seed=0), S.build_tiny_decoder(seed=0)


def test_tiny_decoder_is_deterministic_for_a_seed(tiny_pair):
    a, b = tiny_pair
    rng_before = torch.get_rng_state()
    c = S.build_tiny_decoder(seed=1)
    assert torch.equal(torch.get_rng_state(), rng_before), "build_tiny_decoder must not disturb the global RNG"
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
    assert not torch.equal(sa["model.layers.0.self_attn.q_proj.weight"], sc["model.layers.0.self_attn.q_proj.weight"])
    assert not a.training and a.hscale_seed == 0


def test_tiny_decoder_layers_and_calibration(tiny_pair):
    a, b = tiny_pair
    layers = M.linear_layers(a)
    assert [n for n, _ in layers] == TINY_NAMES
    assert all(mod.in_features % 16 == 0 for _, mod in layers)
    assert a.lm_head.weight is not a.get_input_embeddings().weight  # built untied

    batches = C.tiny_decoder_batches(C.calibration_texts()[:6], batch_size=3, max_length=40)
    ha = C.collect_hessian_diag(a, batches, progress=False)
    hb = C.collect_hessian_diag(b, batches, progress=False)
    for name, mod in layers:
        assert ha[name].shape == (mod.in_features,)
        assert np.all(np.isfinite(ha[name])) and np.all(ha[name] > 0), name
        np.testing.assert_array_equal(ha[name], hb[name], err_msg=name)


def test_logits_nobody_reads_are_not_computed(tiny_pair):
    """Without lm_head among the collected layers the forward computes the last position's
    logits only (logits_to_keep=1), and the other layers' h and amax are bit for bit those of a
    pass that collects lm_head too (which must see, and count, every position)."""
    a, _ = tiny_pair
    batches = C.tiny_decoder_batches(C.calibration_texts()[:6], batch_size=3, max_length=40)
    rows_seen = []
    probe = a.lm_head.register_forward_hook(lambda m, args, out: rows_seen.append(out.shape[1]))
    try:
        body = TINY_NAMES[:-1]
        stats_body, stats_all = {}, {}
        h_body = C.collect_hessian_diag(a, batches, body, progress=False, stats=stats_body)
        seen_body, rows_seen[:] = list(rows_seen), []
        h_all = C.collect_hessian_diag(a, batches, TINY_NAMES, progress=False, stats=stats_all)
        seen_all = list(rows_seen)
    finally:
        probe.remove()
    assert seen_body == [1] * len(batches)
    assert seen_all == [int(b["input_ids"].shape[1]) for b in batches]
    assert stats_all["tokens"]["lm_head"] == sum(int(b["attention_mask"].sum()) for b in batches)
    for name in body:
        np.testing.assert_array_equal(h_body[name], h_all[name], err_msg=name)
        assert stats_body["amax"][name] == stats_all["amax"][name], name


def test_tied_lm_head_can_be_dropped():
    pytest.importorskip("transformers")
    tied = S.build_tiny_decoder(seed=0, config={"tie_word_embeddings": True, "num_hidden_layers": 1})
    names = [n for n, _ in M.linear_layers(tied)]
    assert names[-1] == "lm_head"
    assert [n for n, _ in M.linear_layers(tied, include_tied=False)] == names[:-1]


def test_tiny_decoder_rejects_bad_in_features():
    pytest.importorskip("transformers")
    with pytest.raises(ValueError, match="multiple of 16"):
        S.build_tiny_decoder(seed=0, config={"hidden_size": 120, "head_dim": 30})


def test_byte_tokenizer_and_random_ids():
    tok = S.ByteTokenizer(512)
    enc = tok(["ab", "é"], max_length=16)
    assert enc["input_ids"].tolist() == [[1, 3 + 97, 3 + 98, 2], [1, 3 + 0xC3, 3 + 0xA9, 2]]
    enc = tok(["abc", "a"], max_length=4)
    assert enc["input_ids"].tolist() == [[1, 100, 101, 102], [1, 100, 2, 0]]
    assert enc["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    r1, r2 = S.random_token_ids(512, 2, 8, seed=3), S.random_token_ids(512, 2, 8, seed=3)
    assert torch.equal(r1, r2) and r1.shape == (2, 8) and int(r1.max()) < 512


def test_text_batches_by_length_cut_the_longest_first_order_where_padding_costs_most():
    # ByteTokenizer: a text of b UTF-8 bytes is b + 2 tokens (BOS, EOS), truncated to max_length
    tok = S.ByteTokenizer(512)
    texts = ["aaa", "b" * 9, "cc", "d" * 9, "e" * 30, "f", "gg", "hhhh"]
    counts = [min(len(t) + 2, 8) for t in texts]  # by hand: max_length 8 truncates three
    assert counts == [5, 8, 4, 8, 8, 3, 4, 6]
    # longest first, equal counts in order: 8 8 8 6 5 4 4 3 (texts 1 3 4 7 0 2 6 5). At most 3
    # per batch and 10 slots per call, three batches are the fewest: sizes 3 3 2 cost
    # 24 + 18 + 8, 3 2 3 cost 24 + 12 + 12, 2 3 3 cost 16 + 24 + 12, each + 30; four or more
    # batches at least the 46 tokens + 40. So 3 2 3: [1 3 4] [7 0] [2 6 5], 78.
    batches = C.text_batches(tok, texts, 3, 8, by_length=True)
    from hscale.calibration.texts import length_batches
    assert length_batches(counts, 3, 10) == [[1, 3, 4], [7, 0], [2, 6, 5]]
    assert len(batches) == len(length_batches(counts, 3))
    order = [i for batch in length_batches(counts, 3) for i in batch]
    rows = [r[:int(m.sum())] for b in batches for r, m in
            zip(b["input_ids"].tolist(), b["attention_mask"])]
    assert rows == [tok(texts[i], max_length=8)["input_ids"][0].tolist() for i in order]
    assert list(C.text_batches(tok, [], 3, 8, by_length=True)) == []


def test_length_batches_is_the_cheapest_cutting_of_the_sorted_texts():
    """Against every cutting of the longest-first order into runs of at most batch_size,
    enumerated: the chosen one costs the least (slots + overhead per batch)."""
    from itertools import product
    from hscale.calibration.texts import length_batches
    rng = np.random.default_rng(5)
    for _ in range(40):
        n, size, overhead = int(rng.integers(1, 10)), int(rng.integers(1, 5)), \
            int(rng.integers(0, 40))
        counts = [int(c) for c in rng.integers(1, 60, n)]
        order = sorted(range(n), key=lambda i: (-counts[i], i))

        def cost(batches):
            return sum(len(b) * max(counts[i] for i in b) + overhead for b in batches)
        cheapest = None
        for cuts in product((False, True), repeat=n - 1):  # a cut after position k
            runs, start = [], 0
            for k, cut in enumerate(cuts + (True,)):
                if cut:
                    runs.append(order[start:k + 1])
                    start = k + 1
            if max(len(r) for r in runs) <= size:
                cheapest = cost(runs) if cheapest is None else min(cheapest, cost(runs))
        got = length_batches(counts, size, overhead)
        assert [i for b in got for i in b] == order and max(len(b) for b in got) <= size
        assert cost(got) == cheapest, (counts, size, overhead)


def test_row_reductions_are_the_sums_and_maxima_they_stand_for():
    from hscale.calibration.rows import column_square_sums, rows_amax, widened
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        x = torch.randn(300, 48, generator=g).to(dtype)
        x[17, 5] = -9.5
        kept = x.clone()
        h = column_square_sums(widened(x))
        assert torch.equal(x, kept)  # the rows themselves are never squared
        assert np.allclose(h.numpy(), xtx_diag(x.double()), rtol=1e-14, atol=0)
        assert torch.equal(h, (x.double() * x.double()).sum(dim=0))  # the products unchanged
        assert rows_amax(x) == 9.5
    assert str(rows_amax(-torch.zeros(2, 16))) == "0.0"  # never -0.0
    with_nan = torch.ones(2, 16)
    with_nan[1, 3] = float("nan")
    assert np.isnan(rows_amax(with_nan))


# ------------------------------------------------------------------------------------------
# bundled data; (e) the default layer
# ------------------------------------------------------------------------------------------


def test_calibration_texts():
    texts = C.calibration_texts()
    assert 60 <= len(texts) <= 120
    assert all(t and not t.startswith("#") and t == t.strip() for t in texts)
    assert len(set(texts)) == len(texts)
    assert re.fullmatch(r"[0-9a-f]{64}", C.calibration_text_sha256())


def test_heldout_texts_are_not_calibration_texts():
    heldout = C.heldout_texts()
    assert len(heldout) >= 50 and len(set(heldout)) == len(heldout)
    assert not set(heldout) & set(C.calibration_texts())


def test_default_layer_loads():
    layer = D.load_default_layer()
    assert layer.name == D.DEFAULT_LAYER_NAME
    assert layer.weight.dtype == np.float32 and layer.weight.shape == (384, 1536)
    assert layer.hessian_diag.dtype == np.float64 and layer.hessian_diag.shape == (1536,)
    assert np.all(np.isfinite(layer.weight))
    assert np.all(np.isfinite(layer.hessian_diag)) and np.all(layer.hessian_diag >= 0)
    assert layer.n_tokens > 0
    assert M.MINILM_PACKAGE in layer.source and C.calibration_text_sha256() in layer.source


def default_layer_tool():
    """tools/build_default_layer.py, the maintainer command that writes the bundled layer."""
    import importlib.util
    path = REPO_ROOT / "tools" / "build_default_layer.py"
    spec = importlib.util.spec_from_file_location("build_default_layer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.extended  # rebuilds the bundled layer from MiniLM (about 17 CPU s)
def test_default_layer_matches_regeneration(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip(M.MINILM_MODULE)
    bundled = D.load_default_layer()
    path = default_layer_tool().build_default_layer(tmp_path / "default_layer.npz")
    fresh = D.load_default_layer(path)
    assert fresh.name == bundled.name and fresh.source == bundled.source
    assert fresh.n_tokens == bundled.n_tokens
    assert np.array_equal(fresh.weight, bundled.weight)
    np.testing.assert_allclose(fresh.hessian_diag, bundled.hessian_diag, rtol=1e-5, atol=1e-9 * bundled.hessian_diag.max())


def test_the_bundled_layer_is_written_as_every_npz_is():
    """One .npz writer (hscale.files.npz_bytes): members stored, not deflated (deflate output
    can differ between zlib builds), with fixed dates; the bundled layer had its own, deflating
    writer."""
    import importlib.resources
    import zipfile
    from hscale import files
    bundled = importlib.resources.files("hscale.demo").joinpath("data", "default_layer.npz")
    with importlib.resources.as_file(bundled) as path, zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
    assert {i.compress_type for i in infos} == {zipfile.ZIP_STORED}
    assert {i.date_time for i in infos} == {files.ZIP_DATE}
