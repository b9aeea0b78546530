"""What ``hscale quantize`` is asked to do: the request, every option checked before any work."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hscale.checkpoints import DEFAULT_MAX_SHARD_BYTES, FORMATS, CheckpointError, read_header
from hscale.checkpoints.layout_base import SCHEMES
from hscale.files import check_output_directory
from hscale.models.architecture import DEFAULT_IGNORE
from hscale.pipelines import pipeline_named
from hscale.reference.constants import DEFAULT_K, DEFAULT_U
from hscale.reference.gptq import DEFAULT_BLOCK_SIZE, DEFAULT_DAMP
from hscale.reference.validation import method_named


@dataclass
class QuantizeRequest:
    """Everything ``hscale quantize`` takes (the command's options, one for one)."""

    model_dir: str | None = None  # a directory or a GGUF file; None: the bundled MiniLM
    out: str = "nvfp4-model"
    pipeline: str = "rtn"
    method: str = "hscale"
    format: str = "compressed-tensors"  # or modelopt, or gguf (a GGUF NVFP4 file, --out NAME.gguf)
    scheme: str = "w4a16"  # "w4a4": an activation scale per Linear too (HSCALE-CAL-2)
    backend: str = "auto"  # the fastest exact backend here (hscale.pipelines.default_backend)
    K: int = DEFAULT_K
    U: int = DEFAULT_U
    ignore: tuple[str, ...] = DEFAULT_IGNORE
    calibration_text: str | None = None  # a text, JSONL or dataset directory; None: bundled
    text_field: str = "text"  # the field of a JSONL record or dataset column holding the text
    samples: int = 512
    seq_len: int = 256
    batch_size: int = 16
    hessian: str | None = None  # hscale calibrate's file
    imatrix: str | None = None  # llama.cpp's importance matrix (GGUF or .dat) as h
    damp: float = DEFAULT_DAMP
    block_size: int = DEFAULT_BLOCK_SIZE
    act_order: bool = False
    static_groups: bool = False
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
    force: bool = False
    progress: bool = True
    device: str | None = None  # calibration device ("cpu", "cuda", "auto" for accelerate)
    calibration_dtype: str = "float32"  # the dtype the calibration forward runs in
    report_errors: bool = False  # calibrate (h, and G where it fits) for the report's errors
    no_report: bool = False  # no per-layer errors against RTN (the shifts only)
    sequential: str = "auto"  # "auto": block by block for decoders; "never": the whole model
    resume: bool = True  # adopt an interrupted run's partial output (same command)
    keep_h: bool = True  # H-Scale: the h used, beside the output (quantize.kept)


#: What ``--calibration-dtype`` takes: float32 (the default: the statistics of the model run in
#: float32, whichever path computes them) or bfloat16 (the dtype decoders are stored and served
#: in; its matrix products run 3-4x faster on a CPU with AVX512-BF16 or AMX, and on GPUs).
CALIBRATION_DTYPES = ("float32", "bfloat16")


#: What ``--device`` takes.
DEVICES = ("cpu", "cuda", "cuda:N", "auto")


def check_device(device) -> None:
    """``--device``: one of DEVICES, and CUDA only where a CUDA device is (said before any model
    is loaded)."""
    if device in (None, "cpu", "auto"):
        return
    text = str(device)
    if text != "cuda" and not (text.startswith("cuda:") and text[5:].isdigit()):
        raise ValueError(f"--device {text}: one of {', '.join(DEVICES)}")
    try:
        import torch
    except ImportError:
        raise ValueError(f"--device {text}: torch is not installed") from None
    if not torch.cuda.is_available():
        raise ValueError(f"--device {text}: no CUDA device here (torch {torch.__version__}, "
                         f"CUDA {'built in' if torch.version.cuda else 'not built in'}); "
                         "calibrate on the CPU (--device cpu, the default)")
    if text.startswith("cuda:") and int(text[5:]) >= torch.cuda.device_count():
        raise ValueError(f"--device {text}: there are {torch.cuda.device_count()} CUDA devices "
                         "here")


@dataclass(frozen=True)
class CheckedRequest:
    """A request every refusal of which was given (``check_request``), with what checking it
    read, once, for the run: the backend built, the model (a directory, or a GGUF model file
    opened and its header read), the GGUF output (``--format gguf``), the importance matrix
    (``--imatrix``)."""

    request: QuantizeRequest
    backend: Any
    source: Any  # .source.ModelSource
    gguf_output: Any = None  # .source.GGUFOutput, for --format gguf
    imatrix: Any = None  # hscale.calibration.imatrix.Imatrix, for --imatrix


def check_request(request: QuantizeRequest) -> CheckedRequest:
    """Every refusal a user can get from the options, the GGUF header or the config, in one
    line each, before any tensor is read (docs/quantize.md lists them; tests/quantize/
    test_quantize_refusals.py walks the list). Returns the checked request."""
    from .source import GGUF_FORMAT, check_gguf_output, check_source
    from hscale.pipelines import pipeline_named as pipeline_of
    chosen = pipeline_of(request.pipeline)
    method = method_named(request.method)
    if request.format not in FORMATS + (GGUF_FORMAT,):
        raise ValueError(f"--format {request.format!r}: one of "
                         f"{', '.join(FORMATS + (GGUF_FORMAT,))}")
    source = check_source(request.model_dir)
    if request.scheme not in SCHEMES:
        raise ValueError(f"--scheme {request.scheme!r}: one of {', '.join(SCHEMES)}")
    if request.scheme == "w4a4" and request.hessian is not None:
        raise ValueError("--scheme w4a4 with --hessian: the activation scales come from the "
                         "calibration forward pass (each Linear's input amax, spec "
                         "HSCALE-CAL-2), which a Hessian file does not hold; leave out "
                         "--hessian")
    for name in ("samples", "seq_len", "batch_size", "block_size", "max_shard_bytes"):
        value = getattr(request, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"--{name.replace('_', '-')} {value!r}: must be a positive integer")
    if not (math.isfinite(request.damp) and request.damp >= 0):
        raise ValueError(f"--damp {request.damp!r}: must be finite and >= 0")
    if method.reads_blocks and chosen.needs_full_hessian:
        raise ValueError(f"--pipeline {request.pipeline} --method {request.method}: GPTQ's sweep "
                         "scores each group with h = diag(H) (spec HSCALE-GPTQ-1); use --method "
                         "hscale")
    if request.no_report and request.report_errors:
        raise ValueError("--no-report with --report-errors: one asks for no per-layer errors, "
                         "the other for more of them; give one")
    if request.static_groups and not chosen.needs_full_hessian:
        raise ValueError("--static-groups: only the gptq pipeline has groups to fix up front")
    if request.act_order and not chosen.needs_full_hessian:
        raise ValueError("--act-order: only the gptq pipeline has a column order")
    gguf_output = check_gguf_output(request, source) if request.format == GGUF_FORMAT \
        else None
    check_output_directory(gguf_output.work_target if gguf_output is not None
                           else Path(request.out), request.force)
    check_calibration_data(request)
    check_device(request.device)
    if request.calibration_dtype not in CALIBRATION_DTYPES:
        raise ValueError(f"--calibration-dtype {request.calibration_dtype!r}: one of "
                         f"{', '.join(CALIBRATION_DTYPES)}")
    if request.sequential not in ("auto", "never"):
        raise ValueError(f"--sequential {request.sequential!r}: auto or never")
    imatrix = check_imatrix_request(request) if request.imatrix is not None else None
    if request.hessian is not None:
        if not Path(request.hessian).is_file():
            raise ValueError(f"--hessian {request.hessian}: no such file")
        try:
            read_header(Path(request.hessian))
        except CheckpointError as exc:
            raise ValueError(f"--hessian {request.hessian}: unreadable, not an hscale "
                             f"calibrate file ({exc})") from None
    from hscale.backends import get
    from hscale.pipelines import resolve_backend
    backend = get(resolve_backend(request.backend))
    ok, why = backend.available()
    if not ok:
        raise ValueError(f"--backend {request.backend}: not available here: {why}")
    return CheckedRequest(request, backend, source, gguf_output, imatrix)


def check_calibration_data(request: QuantizeRequest) -> None:
    """``--calibration-data`` read before any model is (its first ``--samples`` texts), so that
    a wrong path, format or field is said in one line before any work."""
    if request.calibration_text is None:
        return
    if not Path(request.calibration_text).exists():
        raise ValueError(f"--calibration-data {request.calibration_text}: no such file or "
                         "directory")
    if request.hessian is None and request.imatrix is None and (
            needs_calibration(request) or request.report_errors):
        from hscale.calibration.sources import read_texts
        read_texts(request.calibration_text, request.text_field, request.samples)


def check_imatrix_request(request: QuantizeRequest):
    """``--imatrix``: a readable importance matrix (HSCALE-CAL-3), for what it can stand in
    for: h. Not with --hessian, nor where a forward pass must give more than h (W4A4's amax,
    GPTQ's full H, hscale-block's 16 x 16 blocks). Returns it, read (once: the run uses it)."""
    from hscale.calibration.imatrix import read_imatrix
    method = method_named(request.method)
    needs = {"--scheme w4a4": request.scheme == "w4a4" and "each Linear's input amax",
             f"--pipeline {request.pipeline}": pipeline_named(request.pipeline).needs_full_hessian
             and "the full H = X^T X",
             f"--method {request.method}": method.reads_blocks and
             "the diagonal 16 x 16 blocks of X^T X",
             "--hessian": request.hessian is not None and "h a second time"}
    for option, what in needs.items():
        if what:
            raise ValueError(f"--imatrix with {option}: that needs {what}, which an importance "
                             "matrix (the sums of x^2 per input column) does not hold")
    return read_imatrix(request.imatrix)


def needs_calibration(request: QuantizeRequest) -> bool:
    """Whether the run must calibrate: its method reads statistics (h, or the blocks), its
    pipeline needs the full H, or W4A4 needs each Linear's input amax."""
    return (method_named(request.method).reads_statistics
            or pipeline_named(request.pipeline).needs_full_hessian or request.scheme == "w4a4")
