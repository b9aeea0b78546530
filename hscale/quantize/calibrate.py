"""Calibration of a model directory for ``hscale quantize`` and ``hscale calibrate``: h (and the
full H for GPTQ) of every Linear to be quantized, from a forward pass over the calibration text
(HSCALE-CAL-1)."""

from __future__ import annotations

from pathlib import Path

from hscale.calibration import calibration_texts as bundled
from hscale.calibration import collect_hessian, collect_hessian_diag, save_hessians, text_batches
from hscale.checkpoints import SafetensorsModel
from hscale.models.architecture import architecture, architecture_linears
from hscale.models.loading import quiet_transformers

from .plan import plan_layers
from .request import QuantizeRequest, model_directory


def calibration_texts(request: QuantizeRequest) -> list[str]:
    if request.calibration_text is None:
        texts = bundled()
    else:
        lines = Path(request.calibration_text).read_text(encoding="utf-8").splitlines()
        texts = [t.strip() for t in lines if t.strip() and not t.lstrip().startswith("#")]
        if not texts:
            raise ValueError(f"--calibration-text {request.calibration_text}: no texts in it")
    return texts[:request.samples]


def calibrate(directory: Path, modules: list[str], request: QuantizeRequest, full: bool,
              texts: list[str] | None = None):
    """({module: h}, {module: H} or {}, facts) from a forward pass over the calibration text
    (or ``texts``)."""
    import torch
    import transformers
    texts = calibration_texts(request) if texts is None else texts
    cls, _ = architecture(directory)
    with quiet_transformers():
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        except Exception as exc:  # noqa: BLE001 - any failure: the directory has no tokenizer
            raise ValueError(f"{directory}: no tokenizer to calibrate with ({exc}); pass "
                             "--hessian with h from hscale calibrate") from None
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        options = dict(dtype=torch.float32)
        if request.device == "auto":
            options["device_map"] = "auto"  # accelerate's offload across devices
        model = cls.from_pretrained(directory, **options)
    if request.device not in (None, "auto"):
        model = model.to(request.device)
    model.eval()
    batches = text_batches(tokenizer, texts, request.batch_size, request.seq_len)
    stats: dict = {}
    layers = {name: model.get_submodule(name) for name in modules}
    if full:
        H, h = collect_hessian(model, batches, layers, progress=request.progress,
                               desc="calibration", stats=stats)
    else:
        h, H = collect_hessian_diag(model, batches, layers, progress=request.progress,
                                    desc="calibration", stats=stats), {}
    del model
    facts = {"texts": len(texts), "batches": stats.get("batches"), "seq_len": request.seq_len,
             "tokens": max(stats.get("tokens", {0: 0}).values(), default=0),
             "full_hessian": bool(H)}
    return h, H, facts


def calibrate_to_file(request: QuantizeRequest, path, *, full: bool, force: bool) -> dict:
    """``hscale calibrate``: h (and H) of the Linears ``hscale quantize`` would quantize with
    the same ignore list, written to ``path``."""
    path = Path(path)
    if path.exists() and not force:
        raise ValueError(f"{path} exists; choose another --out or pass --force to replace it")
    if not path.absolute().parent.is_dir():
        raise ValueError(f"--out {path}: the directory {path.absolute().parent} does not exist")
    for name in ("samples", "seq_len", "batch_size"):
        value = getattr(request, name)
        if value < 1:
            raise ValueError(f"--{name.replace('_', '-')} {value}: must be a positive integer")
    if request.calibration_text is not None and not Path(request.calibration_text).is_file():
        raise ValueError(f"--calibration-text {request.calibration_text}: no such file")
    directory = model_directory(request)
    plans = plan_layers(SafetensorsModel(directory), architecture_linears(directory),
                        request.ignore)
    modules = [p.module for p in plans if p.quantize]
    h, H, facts = calibrate(directory, modules, request, full)
    facts["layers"] = len(modules)
    save_hessians(path, h, H, facts)
    return facts
