"""What a run reads and where its output goes, beyond a model directory in and a checkpoint
directory out:

* a **GGUF model file** in (``hscale quantize FILE.gguf``): dequantized by transformers' GGUF
  loading into a temporary Hugging Face directory beside the output
  (``hscale.checkpoints.from_gguf``), which the run reads like any other and removes at its
  end; a resumed run is recognised by the GGUF file, not by that directory;
* a **GGUF NVFP4 file** out (``--format gguf``): the run writes its compressed-tensors
  checkpoint under a hidden name beside the file, then converts it (``hscale convert --to
  gguf``'s writer, carrying the source GGUF's tokenizer, metadata and unquantized tensors as
  stored) and removes it; the report and the kept h go beside the file.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

#: ``--format``'s value that writes a GGUF file instead of a checkpoint directory.
GGUF_FORMAT = "gguf"
#: What a run's side files are called beside a GGUF output ``NAME.gguf``.
GGUF_SIDE_SUFFIXES = {"report": ".quantization_report.json", "h": ".hscale-h.safetensors"}


def is_gguf_source(request) -> bool:
    """The model to quantize is a file (a GGUF model), not a directory."""
    return request.model_dir is not None and Path(request.model_dir).is_file()


def check_source(request) -> None:
    """The model: a Hugging Face directory (config.json) or a readable GGUF model file (its
    header read; an architecture transformers does not read from GGUF, an imatrix, a missing
    package are refused in one line)."""
    if request.model_dir is None:
        return
    path = Path(request.model_dir)
    if path.is_file():
        from hscale.models.gguf_source import read_gguf_header
        read_gguf_header(path)
        return
    if not path.is_dir():
        raise ValueError(f"{path}: no such model directory or GGUF file")
    if not (path / "config.json").is_file():
        raise ValueError(f"{path}: no config.json (not a Hugging Face model directory)")


def check_gguf_output(request) -> None:
    """``--format gguf``: a W4A16 model of an architecture whose llama.cpp graph applies every
    NVFP4 tensor's .scale, written to a named ``.gguf`` file that may be replaced."""
    import json
    from hscale.checkpoints.to_gguf import ARCHITECTURES, check_destination, hyperparameters
    if request.scheme != "w4a16":
        raise ValueError(f"--format gguf --scheme {request.scheme}: llama.cpp runs NVFP4 "
                         "weights with its own activation quantization, so a GGUF file is "
                         "W4A16 only (--scheme w4a16)")
    if not str(request.out).endswith(".gguf"):
        raise ValueError(f"--format gguf --out {request.out}: a GGUF file is one file; name "
                         "it NAME.gguf")
    check_destination(Path(request.out), request.force, argument="--out")
    if is_gguf_source(request):
        from hscale.models.gguf_source import read_gguf_header
        header = read_gguf_header(request.model_dir)
        if header.architecture not in set(ARCHITECTURES.values()):
            raise ValueError(
                f"{request.model_dir}: general.architecture {header.architecture!r}: GGUF NVFP4 "
                "is written for the llama.cpp graphs known to apply every NVFP4 tensor's "
                f".scale ({', '.join(sorted(set(ARCHITECTURES.values())))}, spec "
                "NVFP4-GGUF-1); write --format compressed-tensors or modelopt")
    elif request.model_dir is not None:
        directory = Path(request.model_dir)
        hyperparameters(json.loads((directory / "config.json").read_text()), directory)
    else:
        raise ValueError("--format gguf: the bundled MiniLM is a BERT encoder, which llama.cpp's "
                         "bert graph runs without applying the FFN's .scale (spec NVFP4-GGUF-1)")


@contextlib.contextmanager
def source_directory(request, log=None):
    """The Hugging Face model directory the run reads: the request's own, the bundled MiniLM's,
    or, for a GGUF model file, a hidden temporary directory written from it beside the output
    (removed when the run ends, whatever way it ends)."""
    if not is_gguf_source(request):
        from .request import model_directory
        yield model_directory(request)
        return
    from hscale.checkpoints.from_gguf import temporary_model_directory
    with temporary_model_directory(request.model_dir, Path(request.out).absolute().parent,
                                   log) as directory:
        yield directory


def fingerprint_files(request, source) -> list:
    """The files a resumed run must find unchanged: the GGUF model file, or the source
    directory's weight files."""
    return [Path(request.model_dir)] if is_gguf_source(request) else list(source.files)


def work_target(request) -> Path:
    """Where the run's checkpoint directory goes: ``--out`` itself, or for ``--format gguf``
    the name (never committed: only its hidden partial is written) of the checkpoint the GGUF
    file is converted from."""
    out = Path(request.out)
    return out if request.format != GGUF_FORMAT else out.with_name(out.name + ".checkpoint")


def gguf_side_file(out, kind: str) -> Path:
    """The report (``kind`` "report") or kept h ("h") beside a GGUF output ``NAME.gguf``."""
    out = Path(out)
    return out.with_name(out.name.removesuffix(".gguf") + GGUF_SIDE_SUFFIXES[kind])
