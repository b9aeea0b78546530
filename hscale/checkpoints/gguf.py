"""GGUF NVFP4, the third checkpoint layout: llama.cpp's ``GGML_TYPE_NVFP4`` (docs/spec.md
NVFP4-GGUF-1, docs/checkpoints.md "GGUF NVFP4").

One quantized Linear ``X`` of a GGUF file is two tensors:

* ``X.weight``, type NVFP4 (40): each row of ``n`` weights (``n`` a multiple of 64) is ``n/64``
  blocks of 36 bytes, four scale bytes (one per 16-element group, the same E4M3 bytes as
  NVFP4-PACK-2) then 32 code bytes; in the codes of group ``s`` of a block, byte ``j`` holds
  element ``16 s + j`` in its low nibble and element ``16 s + j + 8`` in its high nibble (not the
  ``2i`` / ``2i+1`` pairs of NVFP4-PACK-1; ``hscale.reference.gguf_blocks``);
* ``X.scale``, F32 of shape [1]: the multiplier ``s_g`` itself (NVFP4-GS-1), which llama.cpp
  multiplies into the matmul's output (a missing one reads as 1.0).

GGUF names are llama.cpp's (``blk.0.attn_q``), and for the llama architecture the rows of the
query and key projections are permuted into ggml's rope order. The reader here presents a GGUF
file as the Hugging Face model sees it: every NVFP4 tensor as the three tensors of a quantized
Linear (packed codes in NVFP4-PACK-1's order, scale bytes, the global scale) under the module's
Hugging Face name, the permutation undone, so ``hscale check`` judges it as it judges the other
layouts (and against ``--original``). ``hscale convert --to gguf`` (``hscale.checkpoints.to_gguf``)
writes it. The ``gguf`` package is needed for both (the ``engines`` extra).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hscale.reference import GROUP_SIZE
from hscale.reference.gguf_blocks import from_gguf_blocks

from .gguf_file import GGUFFile
from .gguf_transformers import transformers_reads
from .inputs import ConfigDoesNotBuild, open_regular
from .layout_base import CheckpointFormat, Layout
from .safetensors import CheckpointError, TensorInfo

from .gguf_facts import (MAGIC, NVFP4_TYPE, PERMUTED_ARCHITECTURES, PREC_A4_KEY,  # noqa: F401
                         PREC_NAMES_KEY, SCALE_APPLYING_ARCHITECTURES, SOURCE_MODULES_KEY,
                         SOURCE_TENSORS_KEY, KINDS, head_count_key,
                         hugging_face_names, read_key_types, required_keys)


def require_gguf():
    """The ``gguf`` package, or a CheckpointError saying how to install it."""
    try:
        import gguf
    except ImportError:
        raise CheckpointError("GGUF needs the gguf package: pip install 'hscale-nvfp4[engines]' "
                              "(or pip install gguf==0.19.0)") from None
    return gguf


def is_gguf_file(path) -> bool:
    """Whether ``path`` is a regular file starting with the GGUF magic (nothing else is
    opened: a FIFO would block the open)."""
    try:
        with open_regular(path) as f:
            return f.read(4) == MAGIC
    except (CheckpointError, OSError):
        return False


# --------------------------------------------------------------------------------------------
# the rows of llama's query and key projections
# --------------------------------------------------------------------------------------------

def rope_permute(rows: np.ndarray, n_head: int) -> np.ndarray:
    """Hugging Face's rotate-half row order -> ggml's rope order (llama.cpp's
    ``LlamaModel.permute``); whole rows move, so it applies to codes and scale bytes alike."""
    return (rows.reshape(n_head, 2, rows.shape[0] // n_head // 2, *rows.shape[1:])
            .swapaxes(1, 2).reshape(rows.shape))


def rope_unpermute(rows: np.ndarray, n_head: int) -> np.ndarray:
    """The inverse of ``rope_permute``."""
    return (rows.reshape(n_head, rows.shape[0] // n_head // 2, 2, *rows.shape[1:])
            .swapaxes(1, 2).reshape(rows.shape))


def permuted_heads_key(architecture: str, gguf_name: str, fields: dict) -> str | None:
    """The metadata key of the head count whose rope permutation a tensor's rows carry, or
    None."""
    if architecture not in PERMUTED_ARCHITECTURES:
        return None
    if gguf_name.endswith(".attn_q.weight"):
        return head_count_key(architecture)
    if gguf_name.endswith(".attn_k.weight"):
        key = head_count_key(architecture, kv=True)
        return key if key in fields else head_count_key(architecture)
    return None


def permuted_heads(architecture: str, gguf_name: str, fields: dict) -> int | None:
    """The head count whose rope permutation a tensor's rows carry, or None."""
    key = permuted_heads_key(architecture, gguf_name, fields)
    return None if key is None else int(fields[key])


# --------------------------------------------------------------------------------------------
# the layout, for hscale check
# --------------------------------------------------------------------------------------------

class GGUFLayout(Layout):
    """GGUF as ``hscale check`` sees it through ``GGUFCheckpoint``: the virtual tensors
    ``X.weight`` (packed), ``X.weight_scale`` (scale bytes) and ``X.scale`` (s_g)."""

    name = "gguf"
    clause = "NVFP4-GGUF-1"
    suffixes = {"packed": ".weight", "scale": ".weight_scale", "global": ".scale"}
    global_shape = (1,)
    stores_reciprocal = False
    config_file = "the GGUF file's metadata"
    ignore_key = "unquantized"
    #: llama.cpp keeps q, k, v (and gate, up) as separate tensors, each with its own .scale.
    one_scale_per_fused_set = False
    #: Each tensor says its own type: a Linear stored unquantized needs no list.
    lists_unquantized = False

    def detect(self, directory, config):
        return None  # a GGUF file is recognised by its magic, not by a config

    def config_findings(self, detected, model):
        problems, notes = [], []
        architecture = model.fields.get("general.architecture")
        if isinstance(architecture, str) and architecture:
            problems += [f"metadata {key} is missing: llama.cpp's loader requires it"
                         for key in required_keys(architecture) if key not in model.fields]
        if architecture not in SCALE_APPLYING_ARCHITECTURES:
            problems.append(
                f"general.architecture {architecture!r}: llama.cpp's graph for it does not "
                "multiply every NVFP4 matmul by the tensor's .scale (only "
                f"{', '.join(SCALE_APPLYING_ARCHITECTURES)} are known to), so weights come out "
                "1/s_g too large")
        tagged = model.fields.get(PREC_NAMES_KEY) or []
        if not KINDS["an array of strings"](tagged):
            problems.append(f"metadata {PREC_NAMES_KEY} is {type(tagged).__name__}, not an "
                            "array of tensor names: llama.cpp reads no precision tag from it")
            tagged = []
        tagged = set(tagged)
        untagged = [n for n in model.nvfp4_tensors if n not in tagged]
        if untagged:
            notes.append(f"{len(untagged)} NVFP4 tensors (first {untagged[0]}) are not tagged "
                         f"{PREC_A4_KEY} = false: llama.cpp's CUDA backend on Blackwell runs "
                         "them with 4-bit activations (on the CPU, activations are Q8_0 anyway)")
        notes += model.notes
        return problems, notes

    def quantizes_more_than_weights(self, detected):
        return None

    def _written_by_convert(self, *_):
        raise CheckpointError("a GGUF file is written by hscale convert --to gguf only")

    config = take_original = converted_from = restore = place_config = ignore_entries = \
        _written_by_convert


GGUF = GGUFLayout()


class GGUFCheckpoint:
    """A GGUF file read as a checkpoint of Hugging Face-named tensors (what ``hscale check``
    reads of a ``SafetensorsModel``: ``directory``, ``info``, ``metadata``, ``names()``,
    ``array(name)``). NVFP4 tensors are decoded from their blocks (``from_gguf_blocks``), the rope
    permutation undone; F32, F16 and BF16 tensors are given as they are. The file is read by
    the kit's one GGUF reader, which validates the container (``gguf_file.GGUFFile``,
    NVFP4-GGUF-2; every metadata string decoded, so checked as UTF-8), and so is every value
    read from the metadata: the names the writer recorded, the head counts of a permuted
    architecture (NVFP4-GGUF-1)."""

    def __init__(self, path):
        gguf = require_gguf()
        self.directory = Path(path)
        self.file = GGUFFile(self.directory)  # the file's header and tensors as stored
        self.fields = self.file.values()  # its metadata as Python values
        self.metadata: dict = {}
        self.info: dict[str, TensorInfo] = {}
        self.file_of: dict[str, Path] = {}  # every tensor's file: this one
        self.nvfp4_tensors: list[str] = []
        self.notes: list[str] = []
        self._sources: dict = {}  # name -> (reader tensor, role, heads)
        architecture = self.fields.get("general.architecture", "")
        if not isinstance(architecture, str):
            raise CheckpointError(f"{path}: metadata general.architecture is "
                                  f"{type(architecture).__name__}, not a string (spec "
                                  "NVFP4-GGUF-2)")
        _check_key_types(gguf, self.file, architecture, path)
        hf_names = _hf_names(self.fields, self.file, path)
        plain = {"F32": gguf.GGMLQuantizationType.F32, "F16": gguf.GGMLQuantizationType.F16,
                 "BF16": gguf.GGMLQuantizationType.BF16}
        skipped = []
        self.unread = skipped  # "name (TYPE)" of every tensor of a type not read
        for tensor in self.file.tensors:
            name, shape = tensor.name, tensor.shape  # row-major (ggml's ne reversed)
            heads = self._heads(architecture, name, shape)
            if tensor.ggml_type == NVFP4_TYPE:
                if len(shape) != 2:
                    raise CheckpointError(f"{path}: NVFP4 tensor {name!r} has shape {shape}: "
                                          "merged MoE experts (3-D) are not read yet, only "
                                          "2-D Linears (spec NVFP4-GGUF-1)")
                module = hf_names.get(name, name).removesuffix(".weight")
                self.nvfp4_tensors.append(name)
                rows, cols = shape
                self._add(f"{module}.weight", "U8", (rows, cols // 2), tensor, "packed", heads)
                self._add(f"{module}.weight_scale", "F8_E4M3", (rows, cols // GROUP_SIZE),
                          tensor, "scale", heads)
            elif name.endswith(".scale") and tensor.ggml_type == plain["F32"]:
                weight = name.removesuffix(".scale") + ".weight"
                module = hf_names.get(weight, weight).removesuffix(".weight")
                self._add(f"{module}.scale", "F32", shape, tensor, "plain", None)
            else:
                dtype = next((k for k, v in plain.items() if tensor.ggml_type == v), None)
                if dtype is None:
                    skipped.append(f"{name} ({self.file.type_name(tensor.ggml_type)})")
                    continue
                self._add(hf_names.get(name, name), dtype, shape, tensor, "plain", heads)
        if skipped:
            self.notes.append(f"{len(skipped)} tensors of other ggml types are not checked "
                              f"(first {skipped[0]})")

    def _heads(self, architecture: str, name: str, shape: tuple) -> int | None:
        """The head count whose rope permutation the tensor's rows carry (None: none), checked:
        a positive integer dividing its rows into pairs of rope halves (NVFP4-GGUF-1)."""
        key = permuted_heads_key(architecture, name, self.fields)
        if key is None:
            return None
        if key not in self.fields:
            raise CheckpointError(f"{self.directory}: metadata {key} is missing: {name!r}'s rows "
                                  f"are in ggml's rope order ({architecture}) and the head count "
                                  "that undoes it is not said (spec NVFP4-GGUF-1)")
        heads = self.fields[key]
        rows = shape[0] if shape else 0
        if isinstance(heads, bool) or not isinstance(heads, int) or heads <= 0 \
                or rows % (2 * heads):
            raise CheckpointError(f"{self.directory}: metadata {key} = {heads!r} does not split "
                                  f"{name!r}'s {rows} rows into heads of rope pairs (a positive "
                                  "integer dividing them by twice itself; spec NVFP4-GGUF-1)")
        return heads

    def _add(self, name, dtype, shape, tensor, role, heads):
        if name in self.info:
            raise CheckpointError(f"{self.directory}: two tensors read as {name!r} (the names "
                                  f"recorded in {SOURCE_TENSORS_KEY} or gguf's name map give "
                                  "one Hugging Face name twice; spec NVFP4-GGUF-2)")
        self.info[name] = TensorInfo(name, dtype, shape)
        self.file_of[name] = self.directory
        self._sources[name] = (tensor, role, heads)

    def names(self) -> list[str]:
        return list(self.info)

    def array(self, name: str) -> np.ndarray:
        tensor, role, heads = self._sources[name]
        data = self.file.raw(tensor)
        info = self.info[name]
        if role == "plain":
            if info.dtype == "BF16":
                import ml_dtypes
                data = data.view(np.uint16).view(ml_dtypes.bfloat16)
            data = data.reshape(info.shape)
        else:
            packed, scale_bytes = from_gguf_blocks(data.reshape(info.shape[0], -1))
            data = packed if role == "packed" else scale_bytes
        if heads is not None:
            data = rope_unpermute(data, heads)
        return np.ascontiguousarray(data)

    def transformers_config(self) -> dict:
        """The model's config as transformers' own GGUF config mapping gives it (``model_type``
        and the hyper-parameters, for ``AutoConfig.for_model``; run on this header, not a second
        parse of the file: ``gguf_transformers.transformers_reads``), with the head size
        llama.cpp reads (``attention.key_length``), which transformers maps for some
        architectures only; a ValueError for an architecture transformers does not read from
        GGUF."""
        try:
            from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
            with transformers_reads(self.file):
                parsed = load_gguf_checkpoint(str(self.directory), return_tensors=False)
        except Exception as exc:  # noqa: BLE001 - transformers' reader: any failure, a note
            text = str(exc).strip().splitlines()
            raise ValueError(f"transformers reads no config from it: {type(exc).__name__}: "
                             f"{text[0] if text else ''}") from None
        config = {k: v for k, v in parsed["config"].items() if not k.startswith("_")}
        architecture = self.fields.get("general.architecture")
        head_dim = self.fields.get(f"{architecture}.attention.key_length")
        if head_dim is None:  # llama.cpp's default (load_hparams), not the config class's
            hidden = self.fields.get(f"{architecture}.embedding_length")
            heads = self.fields.get(head_count_key(architecture))
            if KINDS["a positive integer"](hidden) and KINDS["a positive integer"](heads):
                head_dim = hidden // heads
        if KINDS["a positive integer"](head_dim):
            config["head_dim"] = head_dim
        return config

    def meta_model(self):
        """The causal LM its metadata describes, built by transformers on the meta device (its
        ``config`` has ``architectures`` set): a ValueError when transformers reads no config
        from this file, ConfigDoesNotBuild when the values it reads do not build a model."""
        import torch
        import transformers

        from hscale.models.loading import quiet_transformers
        config = self.transformers_config()
        try:
            with quiet_transformers():
                config = transformers.AutoConfig.for_model(**config)
            with torch.device("meta"), quiet_transformers():
                meta = transformers.AutoModelForCausalLM.from_config(config)
        except Exception as exc:  # noqa: BLE001 - values the metadata gives that do not build
            text = str(exc).strip().splitlines()
            raise ConfigDoesNotBuild(
                f"the GGUF metadata (general.architecture "
                f"{self.fields.get('general.architecture')!r}) describes a model transformers "
                f"cannot build ({type(exc).__name__}: {text[0] if text else ''})") from None
        meta.config.architectures = [type(meta).__name__]
        return meta


def open_gguf(path) -> tuple[CheckpointFormat, GGUFCheckpoint, dict]:
    """(its format, its tensors, module -> {role: tensor name}) of a GGUF file, as
    ``hscale.checkpoints.open_checkpoint`` gives them for a directory."""
    model = GGUFCheckpoint(path)
    modules = GGUF.module_tensors(model)
    if not modules:
        raise CheckpointError(f"{path}: a GGUF file with no NVFP4 tensor (type {NVFP4_TYPE}) "
                              "and no .scale tensor: not an NVFP4 checkpoint")
    return CheckpointFormat(GGUF, [], dict(model.fields), Path(path).name), model, modules


def _check_key_types(gguf, file: GGUFFile, architecture: str, path) -> None:
    """Every key the readers consult stored as the type llama.cpp reads it as
    (``gguf_facts.read_key_types``), or a CheckpointError naming the key (NVFP4-GGUF-2)."""
    def named(types) -> str:
        names = [gguf.GGUFValueType(t).name for t in types]
        return names[0] + (f" of {names[1]}" if len(names) > 1 else "")
    for key, (kind, element) in read_key_types(architecture).items():
        field = file.fields.get(key)
        if field is None:
            continue
        stored = field.types
        expected = [kind] + ([element] if element is not None else [])
        if stored != expected:
            raise CheckpointError(f"{path}: metadata {key} is stored as {named(stored)}; "
                                  f"llama.cpp reads it as {named(expected)} (spec "
                                  "NVFP4-GGUF-2)")


def _hf_names(fields: dict, file: GGUFFile, path) -> dict:
    """GGUF tensor name -> the Hugging Face name it was converted from: as this project's
    writer recorded it (two string arrays of one length, checked), else from gguf's tensor name
    map (the ``model.``-prefixed name of the architecture's Hugging Face layout), else none
    (the GGUF name is kept)."""
    tensors, modules = fields.get(SOURCE_TENSORS_KEY), fields.get(SOURCE_MODULES_KEY)
    if tensors is not None or modules is not None:
        for key, value in ((SOURCE_TENSORS_KEY, tensors), (SOURCE_MODULES_KEY, modules)):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise CheckpointError(f"{path}: metadata {key} is not an array of strings "
                                      "(spec NVFP4-GGUF-2)")
        if len(tensors) != len(modules):
            raise CheckpointError(f"{path}: metadata {SOURCE_TENSORS_KEY} names {len(tensors)} "
                                  f"tensors, {SOURCE_MODULES_KEY} {len(modules)}: which Hugging "
                                  "Face name belongs to which tensor is lost (spec NVFP4-GGUF-2)")
        return dict(zip(tensors, modules))
    architecture = fields.get("general.architecture")
    if not isinstance(architecture, str):
        return {}
    blocks = fields.get(f"{architecture}.block_count", 0)
    blocks = blocks if isinstance(blocks, int) and 0 <= blocks < 1 << 16 else 0
    return hugging_face_names(architecture, blocks, [t.name for t in file.tensors])
