"""``hscale quantize MODEL.gguf --format gguf`` reads the GGUF model file once: one open of the
file (its header from one memory map, its tensors from the same map), no ``gguf.GGUFReader`` of
it, nothing of it read again for the output's untouched tensors; and ``--quiet`` shows no
progress bar of the reading (transformers' GGUF loading drew one whatever ``--quiet`` said)."""

from __future__ import annotations

import builtins
import os
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf", reason="GGUF needs the gguf package (engines extra)")
pytest.importorskip("torch")
pytest.importorskip("transformers")

from helpers.gguf_models import write_gguf_model  # noqa: E402
from helpers.llm_families import written  # noqa: E402

from hscale.checkpoints.gguf_source import GGUFModel  # noqa: E402
from hscale.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("gguf-reads")
    return write_gguf_model(written(root, "llama"), root / "llama-q8_0.gguf").resolve()


def test_the_gguf_model_is_read_once_and_quiet_means_no_bar(model_file, tmp_path, monkeypatch,
                                                            capsys):
    opens, readers = [], []
    real_open, real_os_open, real_reader = builtins.open, os.open, gguf.GGUFReader.__init__

    def counting_open(file, *args, **kwargs):
        if isinstance(file, (str, Path)) and Path(file).resolve() == model_file:
            opens.append(file)
        return real_open(file, *args, **kwargs)

    def counting_os_open(file, *args, **kwargs):  # the reader opens regular files only, so
        if isinstance(file, (str, Path)) and Path(file).resolve() == model_file:  # by os.open
            opens.append(file)
        return real_os_open(file, *args, **kwargs)

    def counting_reader(self, path, *args, **kwargs):
        if Path(path).resolve() == model_file:
            readers.append(path)
        return real_reader(self, path, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(os, "open", counting_os_open)
    monkeypatch.setattr(gguf.GGUFReader, "__init__", counting_reader)
    GGUFModel._opened.clear()  # a fresh command: nothing of this file kept from another test
    code = main(["quantize", str(model_file), "--out", str(tmp_path / "q.gguf"), "--method",
                 "rtn", "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert (tmp_path / "q.gguf").is_file()
    assert len(opens) == 1 and not readers, (opens, readers)
    assert "reading" not in err and "it/s" not in err and "tensor/s" not in err, err
    # without --quiet the reading has its bar
    GGUFModel._opened.clear()
    assert main(["quantize", str(model_file), "--out", str(tmp_path / "r.gguf"), "--method",
                 "rtn"]) == 0
    assert f"reading {model_file.name}" in capsys.readouterr().err
