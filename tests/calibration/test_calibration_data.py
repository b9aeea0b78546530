"""``--calibration-data``: a text file, a JSONL file, a directory of them or a ``datasets``
directory, read in a stated order (the first ``--samples`` texts); mistakes said in one line
naming the file and the line; a calibration set smaller than a Linear's width warned about; an
RTN run reports no calibration time."""

from __future__ import annotations

import json

import pytest

from hscale.calibration.sources import read_texts

TEXTS = ["the first text", "a second one, with a comma", "ünïcödé third", "fourth", "fifth"]


def test_a_text_file_is_one_text_per_line_without_blanks_and_comments(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("# a comment\n\n" + "\n".join(f"  {t}  " for t in TEXTS) + "\n\n",
                    encoding="utf-8")
    assert read_texts(path) == TEXTS
    assert read_texts(path, limit=2) == TEXTS[:2]


def test_a_jsonl_file_takes_its_field_or_bare_strings(tmp_path):
    path = tmp_path / "data.jsonl"
    lines = [json.dumps({"content": t, "id": i}) for i, t in enumerate(TEXTS[:3])]
    lines += ["", json.dumps(TEXTS[3])]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert read_texts(path, "content") == TEXTS[:4]
    with pytest.raises(ValueError, match=r"data.jsonl, line 1: no field 'text' \(--text-field "
                                         r"names the field holding the text; this record has "
                                         r"'content', 'id'\)"):
        read_texts(path)
    path.write_text('{"text": 3}\n')
    with pytest.raises(ValueError, match="line 1: the text is a int, not a string"):
        read_texts(path)
    path.write_text('{"text": "fine"}\n{not json\n')
    with pytest.raises(ValueError, match="line 2: not JSON"):
        read_texts(path)


def test_a_directory_reads_its_text_and_jsonl_files_in_sorted_path_order(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "a.txt").write_text(f"{TEXTS[0]}\n{TEXTS[1]}\n")
    (tmp_path / "b" / "c.jsonl").write_text(json.dumps({"text": TEXTS[2]}) + "\n")
    (tmp_path / "b" / "d.txt").write_text(f"{TEXTS[3]}\n")
    (tmp_path / "notes.md").write_text("not calibration data\n")
    (tmp_path / ".hidden.txt").write_text("hidden\n")
    assert read_texts(tmp_path) == TEXTS[:4]
    assert read_texts(tmp_path, limit=3) == TEXTS[:3]


def test_a_datasets_directory_takes_its_column_train_split_first(tmp_path):
    datasets = pytest.importorskip("datasets")
    data = datasets.DatasetDict({
        "validation": datasets.Dataset.from_dict({"body": ["not this"]}),
        "train": datasets.Dataset.from_dict({"body": TEXTS, "n": list(range(len(TEXTS)))})})
    data.save_to_disk(str(tmp_path / "set"))
    assert read_texts(tmp_path / "set", "body", limit=4) == TEXTS[:4]
    with pytest.raises(ValueError, match=r"no column 'text' \(it has body, n; --text-field"):
        read_texts(tmp_path / "set")


def test_decoder_calibration_on_jsonl_warns_when_it_is_smaller_than_a_linears_width(tmp_path):
    """The small Llama (down_proj: 256 inputs) calibrated on 3 JSONL records of a few bytes
    (the header names the backend ``auto`` chose, torch on the CPU):
    the tokens counted are the texts' byte tokens plus <s> and </s> (the synthetic tokenizer),
    fewer than 256, so the report warns and names the widest Linear. An RTN run of the same
    model reports no calibration."""
    pytest.importorskip("transformers")
    from helpers.llm_families import written
    from hscale.quantize import format_summary, quantize_model
    source = written(tmp_path, "llama")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": t}) + "\n" for t in TEXTS[:3]))
    lines = []
    report = quantize_model(model_dir=str(source), out=str(tmp_path / "out"), progress=False,
                            calibration_text=str(data), text_field="prompt", log=lines.append)
    from hscale.pipelines import AUTO_BACKEND_RULE, default_backend
    assert f"backend {default_backend()} (auto: {AUTO_BACKEND_RULE}); block by block, 2 " \
        "blocks; 14 weights to quantize" in lines[0], lines  # the run's header
    assert report.request["backend"] == default_backend() != "numpy"
    tokens = sum(len(t.encode()) + 2 for t in TEXTS[:3])
    assert report.calibration["texts"] == 3 and report.calibration["tokens"] == tokens
    (warning,) = report.warnings
    assert warning.startswith(f"calibration: {tokens:,} tokens, fewer than the input width of ")
    assert "widest: model.layers.0.mlp.down_proj, 256 inputs" in warning
    assert f"warning: {warning}" in format_summary(report)
    rtn = quantize_model(model_dir=str(source), out=str(tmp_path / "rtn"), progress=False,
                         method="rtn")
    assert "calibration" not in rtn.seconds and not rtn.warnings
    assert "no calibration (not needed)" in format_summary(rtn)
