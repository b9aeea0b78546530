"""What a run reads and where its output goes, checked before any work: the two objects a checked
request holds beside the options.

* ``ModelSource``, the model: a Hugging Face directory (the bundled MiniLM's without one) or a
  **GGUF model file**, opened once (``hscale.checkpoints.gguf_source.GGUFModel``: its header
  read and checked); for the run, the GGUF file's tensors are dequantized one at a time into a temporary
  Hugging Face directory beside the output (``hscale.checkpoints.from_gguf``), which the run
  reads like any other and removes at its end; a resumed run is recognised by the GGUF file,
  not by that directory.
* ``GGUFOutput``, a **GGUF NVFP4 file** out (``--format gguf``): the run writes its
  compressed-tensors checkpoint under a hidden name beside the file, then converts it (``hscale
  convert --to gguf``'s writer, carrying the source GGUF's tokenizer, metadata and unquantized
  tensors as stored, from the one read of the source) and removes it; the report and the kept h
  go beside the file.
"""

from __future__ import annotations

import contextlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: ``--format``'s value that writes a GGUF file instead of a checkpoint directory.
GGUF_FORMAT = "gguf"
#: What a run's side files are called beside a GGUF output ``NAME.gguf``.
GGUF_SIDE_SUFFIXES = {"report": ".quantization_report.json", "h": ".hscale-h.safetensors"}


@dataclass(frozen=True)
class ModelSource:
    """The model of a run, checked: ``directory`` (a Hugging Face model directory) or ``gguf``
    (a GGUF model file opened once), never both."""

    directory: Path | None = None
    gguf: Any = None  # hscale.checkpoints.gguf_source.GGUFModel

    @property
    def path(self) -> Path:
        """What the user named (the report's source)."""
        return self.gguf.path if self.gguf is not None else self.directory

    def fingerprint_files(self, weights) -> list:
        """The files a resumed run must find unchanged: the GGUF model file, or the source
        directory's weight files (``weights``: its ``SafetensorsModel``)."""
        return [self.gguf.path] if self.gguf is not None else list(weights.files)

    @contextlib.contextmanager
    def run_directory(self, out, log=None, progress: bool = False):
        """The Hugging Face model directory the run reads: the source's own, or for a GGUF
        model file a hidden temporary one written from it beside ``out`` (removed when the run
        ends, whatever way it ends)."""
        if self.gguf is None:
            yield self.directory
            return
        import sys

        from hscale.checkpoints.from_gguf import temporary_model_directory
        bar = None
        if progress:  # none under --quiet
            from tqdm import tqdm
            bar = tqdm(total=len(self.gguf.file.tensors), desc=f"reading {self.gguf.path.name}",
                       unit="tensor", file=sys.stderr, dynamic_ncols=True)
        try:
            with temporary_model_directory(self.gguf, Path(out).absolute().parent, log,
                                           bar and (lambda done, total: bar.update(1))
                                           ) as directory:
                if bar is not None:
                    bar.close()
                yield directory
        finally:
            if bar is not None:
                bar.close()


def check_source(model_dir) -> ModelSource:
    """The model: a Hugging Face directory (config.json), the bundled MiniLM (None), or a GGUF
    model file, opened and its header checked (``GGUFModel.open``: not GGUF, an imatrix, an
    architecture transformers does not read from GGUF, a missing package, ... refused in one
    line)."""
    if model_dir is None:
        from hscale.models.minilm import minilm_model_dir
        return ModelSource(directory=minilm_model_dir())
    path = Path(model_dir)
    if path.is_file():
        from hscale.checkpoints.gguf_source import GGUFModel
        return ModelSource(gguf=GGUFModel.open(path))
    if not path.is_dir():
        raise ValueError(f"{path}: no such model directory or GGUF file")
    if not (path / "config.json").is_file():
        raise ValueError(f"{path}: no config.json (not a Hugging Face model directory)")
    return ModelSource(directory=path)


def model_directory(request) -> Path:
    """The request's Hugging Face model directory (the bundled MiniLM's without one), checked."""
    source = check_source(request.model_dir)
    if source.directory is None:
        raise ValueError(f"{source.path}: a GGUF file, not a model directory")
    return source.directory


@dataclass(frozen=True)
class GGUFOutput:
    """``--format gguf``: the GGUF NVFP4 file ``path`` (checked: W4A16, named NAME.gguf, an
    architecture whose llama.cpp graph applies every .scale, replaceable), its side files, and
    the checkpoint it is converted from; ``raw_from``: the source GGUF model, whose unquantized
    tensors are copied as stored."""

    path: Path
    force: bool
    raw_from: Any = None  # hscale.checkpoints.gguf_source.GGUFModel

    @property
    def work_target(self) -> Path:
        """Where the run's checkpoint directory goes (never committed: only its hidden partial
        is written)."""
        return self.path.with_name(self.path.name + ".checkpoint")

    def side_file(self, kind: str) -> Path:
        return gguf_side_file(self.path, kind)

    def write(self, c, output) -> None:
        """The finished checkpoint ``output`` converted to the GGUF file, the report beside
        it; ``output`` then removed."""
        from hscale.checkpoints.to_gguf import convert_to_gguf, format_gguf_conversion
        started = time.perf_counter()
        conversion = convert_to_gguf(output.path, self.path, force=self.force,
                                     raw_from=self.raw_from)
        c.seconds["gguf"] += time.perf_counter() - started
        c.report.gguf = asdict(conversion)
        for line in format_gguf_conversion(conversion).splitlines()[:2]:
            c.log(line)


def check_gguf_output(request, source: ModelSource) -> GGUFOutput:
    """``--format gguf``: a W4A16 model of an architecture whose llama.cpp graph applies every
    NVFP4 tensor's .scale (from the GGUF header or config.json), written to a named ``.gguf``
    file that may be replaced."""
    from hscale.checkpoints.gguf_facts import SCALE_APPLYING_ARCHITECTURES, written_architectures
    from hscale.checkpoints.to_gguf import check_destination, hyperparameters
    if request.scheme != "w4a16":
        raise ValueError(f"--format gguf --scheme {request.scheme}: llama.cpp runs NVFP4 "
                         "weights with its own activation quantization, so a GGUF file is "
                         "W4A16 only (--scheme w4a16)")
    if not str(request.out).endswith(".gguf"):
        raise ValueError(f"--format gguf --out {request.out}: a GGUF file is one file; name "
                         "it NAME.gguf")
    check_destination(Path(request.out), request.force, argument="--out")
    if source.gguf is not None:
        architecture = source.gguf.header.architecture
        if architecture not in SCALE_APPLYING_ARCHITECTURES:
            raise ValueError(
                f"{source.path}: general.architecture {architecture!r}: GGUF NVFP4 (the "
                "default format for a GGUF model) is written for the llama.cpp graphs known to "
                f"apply every NVFP4 tensor's .scale ({', '.join(written_architectures())}, spec "
                "NVFP4-GGUF-1); pick --format compressed-tensors or --format modelopt")
    elif request.model_dir is not None:
        hyperparameters(json.loads((source.directory / "config.json").read_text()),
                        source.directory)
    else:
        raise ValueError("--format gguf: the bundled MiniLM is a BERT encoder, which llama.cpp's "
                         "bert graph runs without applying the FFN's .scale (spec NVFP4-GGUF-1)")
    return GGUFOutput(Path(request.out), request.force, source.gguf)


def gguf_side_file(out, kind: str) -> Path:
    """The report (``kind`` "report") or kept h ("h") beside a GGUF output ``NAME.gguf``."""
    out = Path(out)
    return out.with_name(out.name.removesuffix(".gguf") + GGUF_SIDE_SUFFIXES[kind])
