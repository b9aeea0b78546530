"""Every refusal docs/quantize.md lists ("Refusals") is given, in one line with the text the
table promises, before any tensor of the model is read: the table is walked row by row, each row
run as ``quantize_model`` with reading a tensor (from safetensors or from a GGUF file) made to
fail. A row of the table without a case here, or a case the table does not list, fails too."""

from __future__ import annotations

import re

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="GGUF needs the gguf package (engines extra)")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from helpers.gguf_models import write_gguf_file, write_gguf_model  # noqa: E402
from helpers.llm_families import written  # noqa: E402
from helpers.paths import DOCS, REPO_ROOT  # noqa: E402

from hscale.checkpoints import SafetensorsModel  # noqa: E402
from hscale.checkpoints.gguf_file import GGUFFile  # noqa: E402
from hscale.quantize import quantize_model  # noqa: E402

IMATRIX = REPO_ROOT / "tests" / "calibration" / "data" / "imatrix" / "tiny-llama.imatrix.gguf"


def refusal_table() -> dict[str, str]:
    """docs/quantize.md's refusals: what is asked -> the text it is refused with."""
    text = (DOCS / "quantize.md").read_text()
    section = text.split("## Refusals", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[1].startswith("`") and not set(cells[0]) <= set("-"):
            rows[cells[0]] = cells[1].strip("`")
    return rows


def _gguf(path, architecture: str, keys: dict | None = None, tensors: dict | None = None):
    return str(write_gguf_file(path, architecture, keys, tensors))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("refusals")
    llama = written(root, "llama")
    jsonl = root / "records.jsonl"
    jsonl.write_text('{"body": "a text"}\n')
    (root / "no-config").mkdir()
    (root / "notes.gguf").write_text("not a model\n")
    (root / "taken.gguf").write_bytes(b"")
    (root / "not-hessian.safetensors").write_text("not safetensors\n")
    uint32 = gguf.GGUFValueType.UINT32
    string = gguf.GGUFValueType.STRING
    nvfp4 = np.zeros((4, 36), np.uint8)
    return {
        "root": root, "llama": str(llama), "jsonl": str(jsonl),
        "gguf": str(write_gguf_model(llama, root / "llama-q8_0.gguf")),
        "qwen2": str(written(root, "qwen2")),
        "gemma3": _gguf(root / "gemma3.gguf", "gemma3", {"gemma3.block_count": (1, uint32)}),
        "imatrix-model": _gguf(root / "imatrix.gguf", "llama", {"general.type": ("imatrix",
                                                                                   string)}),
        "rwkv": _gguf(root / "rwkv.gguf", "rwkv6"),
        "scaled": _gguf(root / "nvfp4.gguf", "llama", tensors={
            "blk.0.attn_q.weight": (nvfp4, gguf.GGMLQuantizationType.NVFP4),
            "blk.0.attn_q.scale": (np.ones(1, np.float32), None)}),
        "string-blocks": _gguf(root / "blocks.gguf", "llama",
                               {"llama.block_count": ("two", string)}),
    }


def cases(i: dict) -> dict:
    """Each row of the table as the options of one run (``out`` under the run's directory)."""
    root = i["root"]
    gguf_out = {"format": "gguf", "out": str(root / "out.gguf")}
    return {
        "`--pipeline` not rtn, 4over6 or gptq": dict(model_dir=i["llama"], pipeline="fast"),
        "`--method` not a method": dict(model_dir=i["llama"], method="best"),
        "`--format` not compressed-tensors, modelopt or gguf": dict(model_dir=i["llama"],
                                                                      format="onnx"),
        "a model path that is not there": dict(model_dir=str(root / "nowhere")),
        "a directory without config.json": dict(model_dir=str(root / "no-config")),
        "a file that is not GGUF": dict(model_dir=str(root / "notes.gguf")),
        "an importance matrix given as the model": dict(model_dir=i["imatrix-model"]),
        "a GGUF architecture transformers does not read": dict(model_dir=i["rwkv"]),
        "a GGUF whose NVFP4 weights carry a `.scale`": dict(model_dir=i["scaled"]),
        "a GGUF key the reader needs, of another type": dict(model_dir=i["string-blocks"]),
        "`--scheme` not w4a16 or w4a4": dict(model_dir=i["llama"], scheme="w8a8"),
        "`--scheme w4a4` with `--hessian`": dict(model_dir=i["llama"], scheme="w4a4",
                                                 hessian="h.safetensors"),
        "`--samples`, `--seq-len`, `--batch-size`, `--block-size` or `--max-shard-size` below "
        "1": dict(model_dir=i["llama"], samples=0),
        "`--damp` negative or not finite": dict(model_dir=i["llama"], damp=-1.0),
        "`--pipeline gptq --method hscale-block`": dict(model_dir=i["llama"], pipeline="gptq",
                                                        method="hscale-block"),
        "`--no-report` with `--report-errors`": dict(model_dir=i["llama"], no_report=True,
                                                     report_errors=True),
        "`--static-groups` without gptq": dict(model_dir=i["llama"], static_groups=True),
        "`--act-order` without gptq": dict(model_dir=i["llama"], act_order=True),
        "`--format gguf --scheme w4a4`": dict(model_dir=i["gguf"], scheme="w4a4", **gguf_out),
        "`--format gguf` with an `--out` not named `.gguf`": dict(
            model_dir=i["gguf"], format="gguf", out=str(root / "out")),
        "`--format gguf` onto an existing file without `--force`": dict(
            model_dir=i["gguf"], format="gguf", out=str(root / "taken.gguf")),
        "`--format gguf` (the default for a GGUF) of a Gemma 3 GGUF": dict(model_dir=i["gemma3"],
                                                                          **gguf_out),
        "`--format gguf` of a directory whose model_type llama.cpp's graph does not scale": dict(
            model_dir=i["qwen2"], **gguf_out),
        "`--format gguf` of the bundled MiniLM": dict(model_dir=None, **gguf_out),
        "`--calibration-data` that is not there": dict(model_dir=i["llama"],
                                                       calibration_text=str(root / "none.txt")),
        "`--calibration-data` records without the `--text-field`": dict(
            model_dir=i["llama"], calibration_text=i["jsonl"]),
        "`--device cuda` where there is none": dict(model_dir=i["llama"], device="cuda"),
        "`--calibration-dtype` not float32 or bfloat16": dict(model_dir=i["llama"],
                                                              calibration_dtype="float16"),
        "`--sequential` not auto or never": dict(model_dir=i["llama"], sequential="always"),
        "`--imatrix` with `--pipeline gptq` (or w4a4, hscale-block, `--hessian`)": dict(
            model_dir=i["llama"], pipeline="gptq", imatrix=str(IMATRIX)),
        "an `--imatrix` that is a model": dict(model_dir=i["llama"], imatrix=i["gguf"]),
        "an `--imatrix` that is not there": dict(model_dir=i["llama"],
                                                 imatrix="missing.imatrix"),
        "a `--hessian` that is not there": dict(model_dir=i["llama"],
                                                hessian="missing.safetensors"),
        "a `--hessian` that is not a calibrate file": dict(
            model_dir=i["llama"], hessian=str(root / "not-hessian.safetensors")),
        "a `--backend` not available here": dict(model_dir=i["llama"], backend="cupy"),
        "an `--out` that exists, without `--force`": dict(model_dir=i["gguf"],
                                                          format="compressed-tensors",
                                                          out=str(root / "no-config")),
        "an `--out` in a directory that is not there": dict(model_dir=i["gguf"],
                                                            format="compressed-tensors",
                                                            out=str(root / "no" / "such")),
    }


def test_every_listed_refusal_comes_before_any_tensor_is_read(inputs, monkeypatch):
    def no_tensor(*args, **kwargs):
        raise AssertionError("a tensor was read before the refusal")
    for cls, name in ((SafetensorsModel, "array"), (GGUFFile, "stored"), (GGUFFile, "raw"),
                      (GGUFFile, "dequantized")):
        monkeypatch.setattr(cls, name, no_tensor)
    table, runs = refusal_table(), cases(inputs)
    assert len(table) >= 30 and set(table) == set(runs), set(table) ^ set(runs)
    skipped = set()
    if torch.cuda.is_available():
        skipped.add("`--device cuda` where there is none")
    import importlib.util
    if importlib.util.find_spec("cupy") is not None:
        skipped.add("a `--backend` not available here")
    for asked, promised in table.items():
        if asked in skipped:
            continue
        options = {"out": str(inputs["root"] / "out"), "progress": False, **runs[asked]}
        with pytest.raises(ValueError) as refused:
            quantize_model(**options)
        message = str(refused.value)
        assert promised in message and "\n" not in message, (asked, message)


def test_the_table_is_read_as_written():
    """The walk above sees the table: a row's promised text is what its second cell quotes."""
    table = refusal_table()
    assert table["`--format gguf` (the default for a GGUF) of a Gemma 3 GGUF"] == \
        "pick --format compressed-tensors or --format modelopt"
    assert all(re.fullmatch(r"[^`|]+", text) for text in table.values())
