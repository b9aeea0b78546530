"""The configs of a converted checkpoint (``hscale convert``): the source layout's quantization
config replaced by the target's, the source's kept under ``converted_from`` with a fingerprint
of what was written, and restored by the conversion back unless the config was edited since
(then the edited one is converted, and the report says so: nothing the user changed is dropped
silently). A GGUF source has no config.json: its metadata, as transformers' GGUF reader gives
it, becomes one, and its vocabulary a tokenizer where transformers reads it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .inputs import CheckpointError
from .layout_base import CONVERTED_FROM, Layout


def gguf_model(model, source: Path):
    """The model a GGUF source's metadata describes (built on meta by transformers), whose
    config the output's config.json becomes; a CheckpointError when there is none."""
    try:
        return model.meta_model()
    except ValueError as exc:
        raise CheckpointError(f"{source}: {exc}: the converted checkpoint would have no "
                              "config.json for a loader to build the model from") from None


def gguf_side_files(source: Path, directory: Path, meta, file) -> list[str]:
    """config.json from a GGUF source's metadata (as transformers reads it), and its tokenizer
    where transformers reads the file's vocabulary (from ``file``, the source's ``GGUFFile``:
    ``gguf_transformers.transformers_reads``); returns what the report says of them."""
    import transformers

    from hscale.models.loading import quiet_transformers

    from .gguf_transformers import transformers_reads
    meta.config.save_pretrained(directory)
    notes = [f"config.json: the GGUF metadata as transformers {transformers.__version__} reads "
             f"it ({meta.config.architectures[0]}); GGUF-only metadata (llama.cpp's tensor "
             "tags, the recorded tensor names) has no place in it"]
    try:
        with transformers_reads(file), quiet_transformers():
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(source.parent),
                                                                   gguf_file=source.name)
            tokenizer.save_pretrained(directory)
        notes.append(f"tokenizer: the GGUF vocabulary through transformers "
                     f"({type(tokenizer).__name__})")
    except Exception as exc:  # noqa: BLE001 - any failure: the output says it has none
        text = str(exc).strip().splitlines()
        notes.append(f"no tokenizer written: transformers cannot read the file's vocabulary "
                     f"({type(exc).__name__}: {text[0][:120] if text else ''})")
    for leftover in ("generation_config.json",):
        (directory / leftover).unlink(missing_ok=True)
    return notes


def rewrite_configs(directory: Path, detected, to: Layout, model, plans, meta) -> list[str]:
    """The source layout's quantization configs replaced by the target's, the source's kept
    under ``converted_from`` with a fingerprint of what was written, and restored when
    converting back, unless the config was edited since (the fingerprint differs): then the
    edited one is converted, and the report says so. Returns the report's notes."""
    from hscale import __version__
    layout = detected.layout
    if layout.name == to.name:
        return []
    notes = []
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text()) if config_path.is_file() else {}
    if meta is not None:  # a GGUF source: its metadata became config.json
        original, kept = {"file": Path(model.directory).name}, {}
        ignore = _unquantized(meta, plans)
    else:
        original = layout.take_original(directory, config)
        kept = layout.converted_from(original)
        ignore = detected.ignore
        if kept and not _unedited(kept, original):
            notes.append(f"{detected.config_name} was edited after hscale convert wrote it: "
                         f"converted as it is now; the {kept.get('format')} config it kept "
                         f"under {CONVERTED_FROM} is not restored")
            kept = {}
    if not to.restore(directory, config, kept):
        modules = [n[: -len(".weight")] for n in model.names() if n.endswith(".weight")]
        document = to.config(to.ignore_entries(ignore, layout, modules, plans), __version__)
        document[CONVERTED_FROM] = {"format": layout.name, WRITTEN: _fingerprint(document),
                                    **original}
        to.place_config(directory, config, document)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    return notes


#: The key of ``converted_from`` holding a fingerprint of the config the conversion wrote.
WRITTEN = "written_sha256"


def _fingerprint(document: dict) -> str:
    """sha256 of a quantization config as written, without its ``converted_from`` record."""
    body = {k: v for k, v in document.items() if k != CONVERTED_FROM}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _unedited(kept: dict, original: dict) -> bool:
    """Whether the config that holds ``kept`` (a ``converted_from`` record) is still the one
    the conversion wrote. A record without a fingerprint (an older hscale) is taken as
    unedited, as it was then."""
    if WRITTEN not in kept:
        return True
    documents = [d for d in original.values() if isinstance(d, dict) and CONVERTED_FROM in d]
    return any(_fingerprint(d) == kept[WRITTEN] for d in documents)


def _unquantized(meta, plans: dict) -> list[str]:
    """The Linears, experts and routers of the model a GGUF source describes that it does not
    store quantized: its ignore list."""
    from hscale.models.inventory import inventory
    found = inventory(None, meta)
    return [m for m in list(found.matmuls()) + list(found.routers) if m not in plans]
