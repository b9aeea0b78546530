"""The fidelity analysis tools (hscale/report/analyses.py) on small seeded cases, each against a route
written here independently: brute force over every scale byte, the activations themselves, a
Python loop. Golden values never come from the function under test."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hscale.evaluation.quality import output_error
from hscale.report import analyses
from hscale.reference import SCALE_BYTE_VALUES, compute_global_scale, quantize

E2M1_GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def layer(seed, rows=8, cols=64, tokens=96):
    """A small Linear with correlated, unevenly scaled inputs (as real activations are)."""
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((rows, cols)) * rng.uniform(0.2, 2.0, cols)).astype(np.float32)
    mix = rng.standard_normal((cols, cols)) * 0.3 + np.eye(cols)
    X = (rng.standard_normal((tokens, cols)) * rng.uniform(0.1, 3.0, cols)) @ mix
    s_g = compute_global_scale(float(np.max(np.abs(weight))), 448.0)
    return weight, X, X.T @ X, s_g


def nearest_e2m1(x):
    """The E2M1 value nearest |x| (the grid's even neighbour on a tie), with x's sign."""
    a = abs(x)
    best = min(range(8), key=lambda i: (abs(a - E2M1_GRID[i]), i % 2))
    return np.copysign(E2M1_GRID[best], x)


def test_full_objective_equals_the_output_error_of_the_activations():
    weight, X, G, s_g = layer(0)
    deq = quantize(weight, method="rtn", global_scale=s_g).dequantize()
    d = weight.astype(np.float64) - deq
    by_loop = 0.0
    for t in range(X.shape[0]):
        for i in range(weight.shape[0]):
            by_loop += float(sum(X[t, j] * d[i, j] for j in range(weight.shape[1]))) ** 2
    assert output_error(weight, deq, G) == pytest.approx(by_loop, rel=1e-10)
    assert analyses.direct_output_error(X, weight, deq) == pytest.approx(by_loop, rel=1e-10)


@pytest.mark.parametrize("weighted", [True, False])
def test_full_ladder_equals_an_exhaustive_search(weighted):
    weight, X, G, s_g = layer(1, rows=4, cols=32)
    h = np.diag(G).copy() if weighted else None
    result = analyses.full_ladder(weight, h, s_g)
    hh = np.diag(G) if weighted else np.ones(32)
    start = quantize(weight, method="rtn", global_scale=s_g).scale_bytes
    for r, g in itertools.product(range(4), range(2)):
        w = weight[r, 16 * g:16 * g + 16].astype(np.float64)
        hg = hh[16 * g:16 * g + 16]
        best = None
        for byte in range(1, 127):
            s = float(SCALE_BYTE_VALUES[byte]) * float(s_g)
            q = np.array([nearest_e2m1(x / s) for x in w]) * s
            e = float(np.sum(hg * (w - q) ** 2))
            shift = byte - int(start[r, g])
            key = (e, 2 * abs(shift) - (shift > 0))
            if best is None or key < best[0]:
                best = (key, byte, q)
        assert result.scale_bytes[r, g] == best[1], (r, g)
        np.testing.assert_array_equal(result.dequantize()[r, 16 * g:16 * g + 16],
                                      best[2].astype(np.float32))


def test_a_whole_ladder_window_recovers_all_of_the_gain():
    for seed in (2, 3):
        weight, X, G, s_g = layer(seed)
        sweep = analyses.window_sweep(weight, G, s_g, windows=((126, 252), (6, 16), (0, 1)))
        assert sweep[(126, 252)] == pytest.approx(1.0, abs=1e-12)
        assert sweep[(0, 1)] == 0.0  # the window {0}: max-abs itself


def test_recovered_fraction():
    assert analyses.recovered_fraction(10.0, 7.0, 4.0) == 0.5
    assert np.isnan(analyses.recovered_fraction(4.0, 4.0, 4.0))


@pytest.mark.parametrize("seed", [4, 5, 6])
def test_best_scale_is_no_worse_than_hscale_in_the_full_objective(seed):
    weight, X, G, s_g = layer(seed)
    hs = quantize(weight, np.diag(G).copy(), global_scale=s_g)
    start = SCALE_BYTE_VALUES[hs.scale_bytes].astype(np.float64) * float(s_g)
    oracle = analyses.best_scale(weight, G, start, iterations=40)
    hscale_error = analyses.direct_output_error(X, weight, hs.dequantize())
    assert analyses.direct_output_error(X, weight, oracle.dequantized) <= hscale_error * (1 + 1e-12)
    assert oracle.error == pytest.approx(analyses.direct_output_error(X, weight,
                                                                      oracle.dequantized))
    assert all(b <= a for a, b in zip(oracle.history, oracle.history[1:]))
    again = analyses.best_scale(weight, G, start, iterations=40)
    np.testing.assert_array_equal(again.scales, oracle.scales)  # deterministic
    # its weight is what its scales say: every group's codes re-rounded at its own scale
    for r, g in ((0, 0), (3, 2)):
        s = oracle.scales[r, g]
        expect = [nearest_e2m1(x / s) * s for x in weight[r, 16 * g:16 * g + 16].astype(float)]
        np.testing.assert_allclose(oracle.dequantized[r, 16 * g:16 * g + 16], expect, rtol=1e-15)


def test_best_scale_gains_on_a_layer_where_hscale_leaves_room():
    weight, X, G, s_g = layer(7)
    hs = quantize(weight, np.diag(G).copy(), global_scale=s_g)
    start = SCALE_BYTE_VALUES[hs.scale_bytes].astype(np.float64) * float(s_g)
    oracle = analyses.best_scale(weight, G, start, iterations=60)
    assert oracle.error < 0.99 * output_error(weight, hs.dequantize(), G)


def test_shift_statistics_count_and_measure_each_shift():
    weight, X, G, s_g = layer(8, rows=16, cols=128)
    h = np.diag(G).copy()
    hs = quantize(weight, h, global_scale=s_g)
    stats = analyses.shift_statistics(weight, h, hs)
    delta = hs.delta.reshape(-1)
    assert {s: v["groups"] for s, v in stats["shifts"].items()} == \
        {int(s): int(n) for s, n in zip(*np.unique(delta, return_counts=True))}
    assert sum(v["share"] for v in stats["shifts"].values()) == pytest.approx(1.0)
    assert stats["shifts"][0]["mean_reduction"] == 0.0
    # independently: the group objective at the initial and at the chosen byte
    removed = {}
    rtn = quantize(weight, method="rtn", global_scale=s_g).scale_bytes
    for r, g in itertools.product(range(16), range(8)):
        cols = slice(16 * g, 16 * g + 16)
        w = weight[r, cols].astype(np.float64)

        def objective(byte):  # exact in float64, as the search sees it
            s = float(SCALE_BYTE_VALUES[byte]) * float(s_g)
            return np.sum(h[cols] * (w - np.array([nearest_e2m1(x / s) for x in w]) * s) ** 2)
        e0, e1 = objective(rtn[r, g]), objective(hs.scale_bytes[r, g])
        assert e1 <= e0 * (1 + 1e-12)
        removed[int(hs.delta[r, g])] = removed.get(int(hs.delta[r, g]), 0.0) + e0 - e1
    for shift, total in removed.items():
        assert stats["shifts"][shift]["removed"] == pytest.approx(total, rel=1e-6, abs=1e-9)
    assert sum(v["removed_share"] for v in stats["shifts"].values()) == pytest.approx(1.0)


def test_microcase_recomputed_by_brute_force():
    w = np.array([-3.750, -1.740, 4.320, 4.880])
    X = np.array([[0.600, 1.400, 1.500, 2.000], [2.000, 1.000, 0.700, 1.000]])
    case = analyses.microcase()
    # the paper's min-max row: scale 4.88 / 6, weight error 0.573 and output error 3.927
    s = 4.88 / 6
    q = np.array([nearest_e2m1(x / s) for x in w]) * s
    assert float(np.sum((w - q) ** 2)) == pytest.approx(0.573, abs=5e-4)
    assert float(np.sum((X @ (w - q)) ** 2)) == pytest.approx(3.927, abs=5e-4)
    for objective, error in (("weight", lambda d: float(d @ d)),
                             ("output", lambda d: float(np.sum((X @ d) ** 2)))):
        scores = []
        for byte in range(1, 127):
            s = float(SCALE_BYTE_VALUES[byte])
            q = np.array([nearest_e2m1(x / s) for x in w]) * s
            scores.append((error(w - q), s))
        assert case[objective]["e4m3_scale"] == min(scores)[1]
        assert case[objective]["printed_is_e4m3"] is False  # 0.801, 0.895 are not E4M3 values


# -- hscale report: the figures rendered, byte for byte -----------------------------------------

def tiny_model():
    from types import SimpleNamespace
    weights, G, Gh = {}, {}, {}
    for i, seed in enumerate((11, 12)):
        weight, X, g, _ = layer(seed, rows=8, cols=32, tokens=48)
        _, Xh, gh, _ = layer(seed + 100, rows=8, cols=32, tokens=48)
        name = f"encoder.layer.{i}.output.dense"
        weights[name], G[name], Gh[name] = weight, g, gh
    return SimpleNamespace(weights=weights, G=G, G_heldout=Gh,
                           fused={m: (m,) for m in weights}, directory=None)


def synthetic_doc():
    """A tiny decoder section as synthetic.synthetic_analyses writes it (values made up)."""
    from hscale.report.spread import interval
    from hscale.report.synthetic import CAPTION, SHAPE
    rows = {"rtn": {"ran": True, "data_free": True, "heldout": {"mean": 1.0, "half_width": None},
                    "output": {"mean": 1.0}, "seconds": {"mean": 0.1}},
            "hscale": {"ran": True, "data_free": False, "heldout": interval([0.6, 0.62, 0.61]),
                       "output": interval([0.6, 0.6, 0.6]), "seconds": interval([1, 1.1, 1.2])},
            "scale-only": {"ran": True, "data_free": True, "output": {"mean": 0.8},
                           "heldout": {"mean": 0.8, "half_width": None},
                           "seconds": {"mean": 0.2}},
            "some library": {"ran": False, "data_free": False,
                             "reason": "needs CUDA: and more"}}
    family = {"architecture": "LlamaForCausalLM", "layers": 14, "groups": 100, "experts": 0,
              "rows": rows, "window": {k: interval([0.9, 0.95, 1.0])
                                       for k in ("0,16", "6,16", "6,16 p10")},
              "shift_shares": {k: interval([0.3, 0.31, 0.32])
                               for k in ("keep", "larger", "smaller")}}
    return {"caption": CAPTION, "shape": dict(SHAPE), "subsets": 3, "fraction": 0.5,
            "families": {"Llama": family}}


def test_report_renders_the_same_bytes_twice(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    from hscale import report
    model = tiny_model()
    doc = report.layer_analyses(model, iterations=5, progress=False)
    doc["summary"] = report.summarise(doc)
    doc["pipelines"] = report.pipeline_rows(model)
    doc["microcase"] = analyses.microcase()
    doc["head_to_head"] = {
        "H-Scale": {"ran": True, "seconds": 0.1, "output": {"mean": 0.7, "median": 0.7},
                    "output_heldout": {"mean": 0.72, "median": 0.71}, "improved_heldout": 2,
                    "layers": 2},
        "some library": {"ran": False, "reason": "somelib is not installed here"}}
    doc["synthetic"] = synthetic_doc()
    first = report.render(doc, tmp_path / "a")
    second = report.render(doc, tmp_path / "b")
    pngs = [p.name for p in first if p.suffix == ".png"]
    assert len(pngs) == 7 and "synthetic.png" in pngs
    for a, b in zip(first, second):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert b"Software" not in (tmp_path / "a" / "shifts.png").read_bytes()
    assert not list((tmp_path / "a").glob("*.tmp"))
    tables = (tmp_path / "a" / "tables.md").read_text()
    assert "| some library | not run: somelib is not installed here" in tables
    # the tiny decoders: labelled synthetic, data-free rows said so, not-run rows as such
    assert "synthetic seeded weights: not evidence about trained models" in tables
    assert "| weight-guided (h = 1) | -20.0% (data-free) |" in tables
    assert "| H-Scale | -39.00% +- 2.48 |" in tables  # 0.61 +- 4.303 * 0.01 / sqrt(3)
    assert "| some library | not run: needs CUDA (the head to head above" in tables
    # the tables say what the records say: layer 0's H-Scale error over RTN's
    ratios = [r["output"]["hscale"] / r["output"]["rtn"] for r in doc["layers"]]
    assert f"{100 * (np.mean(ratios) - 1):+.1f}%" in tables


def test_report_keeps_measured_competitor_rows_when_the_library_is_missing(tmp_path):
    import importlib.util
    if importlib.util.find_spec("llmcompressor") is not None:
        pytest.skip("llmcompressor is installed: the kept-row path needs it absent")
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    import json
    from hscale import report
    measured = {"ran": True, "seconds": 3.0, "output": {"mean": 0.8, "median": 0.8},
                "output_heldout": {"mean": 0.81, "median": 0.8}, "improved_heldout": 2,
                "layers": 2, "version": "llmcompressor 0.14"}
    (tmp_path / "figures.json").write_text(json.dumps(
        {"head_to_head": {"llm-compressor MSE observer": measured}}))
    doc = report.build(tmp_path, progress=False, iterations=2, model=tiny_model())
    row = doc["head_to_head"]["llm-compressor MSE observer"]
    assert row["kept_from_earlier_run"] is True and row["output"] == measured["output"]
    assert doc["head_to_head"]["AutoRound NVFP4 RTN (iters=0)"]["ran"] in (True, False)
    assert json.loads((tmp_path / "figures.json").read_text())["head_to_head"][
        "llm-compressor MSE observer"]["kept_from_earlier_run"] is True


def test_report_reuses_measured_rows_when_asked(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed")
    import json
    from hscale import report
    measured = {"ran": True, "seconds": 3.0, "output": {"mean": 0.8, "median": 0.8},
                "output_heldout": {"mean": 0.81, "median": 0.8}, "improved_heldout": 2,
                "layers": 2}
    names = [c[0] for c in report.COMPETITORS] + [f[0] for f in report.FUNCTIONS]
    stale = "a method this report no longer has"
    (tmp_path / "figures.json").write_text(json.dumps(
        {"head_to_head": {name: measured for name in names + [stale]}}))
    doc = report.build(tmp_path, progress=False, iterations=2, model=tiny_model(),
                       reuse_measured=True)
    rows = doc["head_to_head"]
    assert stale not in rows
    assert list(rows)[0].startswith("H-Scale") and rows[list(rows)[0]]["ran"]
    for name in names:
        assert rows[name]["kept_from_earlier_run"] is True
        assert rows[name]["output"] == measured["output"]


def test_embedding_probe_matches_a_model_loaded_with_the_weights_replaced():
    """The end-to-end figure of the head-to-head: the probe's cosines equal those of a fresh
    model loaded with the quantized weights and pooled here by hand; the probe puts the
    original weights back after each call."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from hscale.calibration import heldout_texts
    from hscale.models import minilm_model_dir
    from hscale.evaluation.embeddings import EmbeddingProbe
    from hscale.reference import quantize
    directory = minilm_model_dir()
    texts = heldout_texts()[:12]
    probe = EmbeddingProbe(directory, texts)
    assert probe.cosine({})["min"] == pytest.approx(1.0, abs=1e-12)
    fresh = transformers.AutoModel.from_pretrained(directory).eval()
    modules = ["encoder.layer.0.intermediate.dense", "encoder.layer.3.attention.self.query"]
    quantized = {m: quantize(fresh.get_submodule(m).weight.detach().numpy(), method="rtn")
                 .dequantize() for m in modules}
    got = probe.cosine(quantized)
    assert probe.cosine({})["min"] == pytest.approx(1.0, abs=1e-12)  # originals restored

    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)

    def embed(model):
        with torch.no_grad():
            batch = tokenizer(texts, padding=True, truncation=True, max_length=256,
                              return_tensors="pt")
            hidden = model(**batch).last_hidden_state.double().numpy()
        mask = batch["attention_mask"].numpy()[..., None].astype(np.float64)
        pooled = (hidden * mask).sum(1) / mask.sum(1)
        return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)

    before = embed(fresh)
    with torch.no_grad():
        for m, w in quantized.items():
            fresh.get_submodule(m).weight.copy_(torch.from_numpy(w.astype(np.float32)))
    after = embed(fresh)
    cosines = np.sum(before * after, axis=1)
    assert got["mean"] == pytest.approx(float(np.mean(cosines)), abs=1e-6)
    assert got["min"] == pytest.approx(float(np.min(cosines)), abs=1e-6)
    assert 0.9 < got["min"] < 1.0


def test_spread_interval_is_the_student_t_interval_worked_by_hand():
    """1..5: mean 3, sample sd sqrt(2.5), t(0.975, 4) = 2.7764451 (tables of Student's t give
    2.776), half width 2.7764451 * sqrt(2.5) / sqrt(5) = 2.7764451 * sqrt(0.5) = 1.963243..."""
    from hscale.report.spread import interval
    got = interval([5, 1, 4, 2, 3])
    assert got["mean"] == 3.0
    assert abs(got["half_width"] - 2.7764451052 * 0.5 ** 0.5) < 1e-9


def test_synthetic_family_analyses_are_consistent(monkeypatch):
    """One tiny decoder family, 2 calibration subsets, no competitor libraries: min-max is the
    reference (exactly 0%), a data-free method's held-out figure does not move with the subset,
    the oracle (started at H-Scale's scales) is never worse than H-Scale on the calibration
    text, the shift shares sum to 1; each interval is the one of its per-subset values."""
    pytest.importorskip("transformers")
    from hscale.report import synthetic
    from hscale.report.spread import interval
    monkeypatch.setattr(synthetic, "SHAPE", dict(synthetic.SHAPE, hidden_size=64,
                                                 intermediate_size=128, head_dim=16))
    got = synthetic.family_analyses("llama", {}, subsets=2, iterations=3, competitors=False,
                                    progress=False)
    rows = got["rows"]
    assert got["layers"] == 14 and got["experts"] == 0
    assert rows["rtn"]["data_free"] and rows["rtn"]["heldout"]["mean"] == 1.0
    assert rows["scale-only"]["data_free"] and rows["scale-only"]["heldout"]["half_width"] is None
    first, second = rows["scale-only"]["heldout"]["values"]
    assert first == second  # the held-out G and s_g are fixed: a subset cannot move it
    assert not rows["hscale"]["data_free"] and len(rows["hscale"]["heldout"]["values"]) == 2
    assert rows["hscale"]["heldout"] == interval(rows["hscale"]["heldout"]["values"])
    for a, b in zip(rows["best-scale"]["output"]["values"], rows["hscale"]["output"]["values"]):
        assert a <= b + 1e-12
    assert rows["hscale"]["output"]["mean"] < 1.0
    shares = got["shift_shares"]
    for k in range(2):
        assert abs(sum(shares[n]["values"][k] for n in ("keep", "larger", "smaller")) - 1) < 1e-12
