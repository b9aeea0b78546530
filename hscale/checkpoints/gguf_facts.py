"""What the kit knows of GGUF and llama.cpp, in one place: the file's magic and NVFP4's type
number, the container's limits (versions, name length, dimensions), the metadata keys the kit
reads and writes, which llama.cpp architecture a Hugging Face model type is, which of
llama.cpp's graphs apply an NVFP4 tensor's ``.scale`` (so are written), which permute the query
and key rows, and llama.cpp's tensor names (gguf's name map). Every reader and writer of GGUF
in the kit (``gguf_file``, ``gguf``, ``to_gguf``, ``from_gguf``,
``hscale.checkpoints.gguf_source``, ``hscale.calibration.imatrix``) takes them from here."""

from __future__ import annotations

#: The four bytes a GGUF file starts with.
MAGIC = b"GGUF"
#: ggml's type number of NVFP4 (ggml.h ``GGML_TYPE_NVFP4``).
NVFP4_TYPE = 40
#: The clause of the container (docs/spec.md NVFP4-GGUF-2), which ``gguf_file`` checks.
CONTAINER_CLAUSE = "NVFP4-GGUF-2"
#: The versions llama.cpp reads (gguf.cpp: 1 is refused, so is anything above 3).
VERSIONS = (2, 3)
#: llama.cpp's GGML_MAX_NAME: a tensor name is shorter.
MAX_NAME_BYTES = 64
#: llama.cpp's GGML_MAX_DIMS.
MAX_DIMS = 4

#: Where the writer records each tensor's Hugging Face module (two parallel string arrays).
SOURCE_MODULES_KEY = "hscale.source.modules"
SOURCE_TENSORS_KEY = "hscale.source.tensors"
#: The keys that tell llama.cpp's CUDA backend to keep these weights' activations at 8 bits or
#: more (llama-model.cpp reads them; without them Blackwell runs NVFP4 matmuls W4A4).
PREC_NAMES_KEY = "general.tensor_extra.name"
PREC_A4_KEY = "general.tensor_extra.prec_a4"
#: The general keys a model file's reader consults.
ARCHITECTURE_KEY = "general.architecture"
TYPE_KEY = "general.type"
NAME_KEY = "general.name"

#: The header of the GGUF file a model directory was made from, carried through checkpoints.
METADATA_NAME = "gguf_metadata.json"
#: Keys not carried: the reader's own fields, and what a new file must state afresh.
NOT_CARRIED = ("GGUF.", "general.file_type", "general.quantization_version",
               "general.alignment", "hscale.")

#: llama.cpp architectures (its ``general.architecture``) whose graphs multiply every NVFP4
#: matmul's output by the tensor's ``.scale`` (attention q/k/v/o, the FFN, the output head), as
#: read in the llama.cpp that llama-cpp-python 0.3.36 vendors (src/models/llama.cpp:143, 170,
#: 189-194, 240; src/models/qwen3.cpp:111, 128-130, 153). Other graphs, qwen2 and bert among
#: them, load ``.scale`` but never apply it to the FFN, whose output is then 1/s_g too large.
SCALE_APPLYING_ARCHITECTURES = ("llama", "qwen3")
#: Architectures whose query and key rows are permuted into ggml's rope order
#: (conversion/llama.py ``LlamaModel.permute``); for the others the row order is Hugging Face's.
PERMUTED_ARCHITECTURES = ("llama",)

#: Hugging Face model_type -> llama.cpp architecture where the two names differ (as llama.cpp's
#: converter writes them: Mistral and Mixtral are converted as llama).
LLAMA_CPP_NAMES = {"mistral": "llama", "mixtral": "llama", "qwen2_moe": "qwen2moe",
                   "qwen3_moe": "qwen3moe", "gemma3_text": "gemma3", "cohere": "command-r",
                   "gpt_oss": "gpt-oss", "minimax_m2": "minimax-m2"}
#: The Hugging Face model types ``hscale convert --to gguf`` writes: dense models whose
#: llama.cpp graph applies every ``.scale``.
WRITTEN_MODEL_TYPES = ("llama", "mistral", "qwen3")
#: Why some common model types are refused (their llama.cpp graphs, llama-cpp-python 0.3.36).
REFUSED_BECAUSE = {
    "qwen2": "llama.cpp's qwen2 graph never multiplies the FFN by its .scale "
             "(src/models/qwen2.cpp passes no ffn_*_s): its logits are NaN",
    "bert": "llama.cpp's bert graph never multiplies the FFN by its .scale",
}
#: An MoE expert's part -> llama.cpp's merged expert tensor.
EXPERT_TENSORS = {"gate": "FFN_GATE_EXP", "up": "FFN_UP_EXP", "down": "FFN_DOWN_EXP"}


def llama_cpp_architecture(model_type: str) -> str:
    """The llama.cpp architecture a Hugging Face model type is converted as."""
    return LLAMA_CPP_NAMES.get(model_type, model_type)


def written_architectures() -> list[str]:
    """The llama.cpp architectures GGUF NVFP4 is written for, sorted (for messages)."""
    return sorted(SCALE_APPLYING_ARCHITECTURES)


def head_count_key(architecture: str, kv: bool = False) -> str:
    """The metadata key of the attention's head count (``kv``: of the key and value heads)."""
    return f"{architecture}.attention.head_count" + ("_kv" if kv else "")


def block_count_key(architecture: str) -> str:
    return f"{architecture}.block_count"


def name_map(architecture: str, blocks: int):
    """gguf's tensor name map (Hugging Face names -> llama.cpp's) of a llama.cpp architecture
    and block count, or None where the installed gguf has no architecture of that name."""
    import gguf
    arch = next((a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == architecture), None)
    return None if arch is None else gguf.get_tensor_name_map(arch, blocks)


def expert_tensor_name(part: str, block: int) -> str:
    """llama.cpp's merged tensor of an MoE block's expert ``part`` (gate, up, down)."""
    import gguf
    return gguf.TENSOR_NAMES[getattr(gguf.MODEL_TENSOR, EXPERT_TENSORS[part])].format(
        bid=block) + ".weight"


def hugging_face_names(architecture: str, blocks: int, gguf_names) -> dict:
    """GGUF tensor name -> the ``model.``-prefixed Hugging Face name gguf's map gives it, for
    those it maps."""
    names = name_map(architecture, blocks)
    if names is None:
        return {}
    reverse: dict = {}
    for hf, (_, gguf_name) in names.mapping.items():
        if hf.startswith(("model.", "lm_head")):
            reverse.setdefault(gguf_name, hf)
    out = {}
    for name in gguf_names:
        base, dot, suffix = name.rpartition(".")
        if base in reverse:
            out[name] = f"{reverse[base]}{dot}{suffix}"
    return out


#: What a metadata value must be, by the name a message gives it.
KINDS = {"an integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
         "a positive integer": lambda v: isinstance(v, int) and not isinstance(v, bool)
         and v > 0,
         "a number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
         "a string": lambda v: isinstance(v, str),
         "an array of strings": lambda v: isinstance(v, list)
         and all(isinstance(x, str) for x in v)}


def metadata_value(fields, key: str, kind: str, where, default=None, required: bool = True):
    """The value of metadata ``key`` among ``fields`` (a dict, or ``header_fields``' records),
    checked to be ``kind`` (a key of KINDS); a missing key is ``default`` where one is given (or
    ``required`` is false), else a CheckpointError naming ``where`` and the key, as is a value
    of another type: one line, never a KeyError or TypeError from deep inside."""
    from .safetensors import CheckpointError
    if isinstance(fields, list):  # header_fields' records
        found = [r["value"] for r in fields if r["key"] == key]
        present, value = bool(found), (found[0] if found else None)
    else:
        present, value = key in fields, fields.get(key)
    if not present:
        if default is not None or not required:
            return default
        raise CheckpointError(f"{where}: metadata {key} is missing")
    if not KINDS[kind](value):
        shown = repr(value) if not isinstance(value, (list, str)) or len(value) < 40 else \
            type(value).__name__
        raise CheckpointError(f"{where}: metadata {key} is {shown} "
                              f"({type(value).__name__}), not {kind}")
    return value


#: GGUF's value type numbers (gguf.GGUFValueType) of the types below.
UINT32, STRING, ARRAY, BOOL = 4, 8, 9, 7


def read_key_types(architecture: str) -> dict:
    """Every metadata key the kit's GGUF readers consult, with the type llama.cpp's typed
    getters (llama-model-loader.cpp ``get_key``, ``get_arr``) read it as: (value type, element
    type or None). A key stored as another type is refused by llama.cpp, so by the readers."""
    return {ARCHITECTURE_KEY: (STRING, None),
            block_count_key(architecture): (UINT32, None),
            head_count_key(architecture): (UINT32, None),
            head_count_key(architecture, kv=True): (UINT32, None),
            f"{architecture}.attention.key_length": (UINT32, None),
            f"{architecture}.embedding_length": (UINT32, None),
            SOURCE_TENSORS_KEY: (ARRAY, STRING), SOURCE_MODULES_KEY: (ARRAY, STRING),
            PREC_NAMES_KEY: (ARRAY, STRING), PREC_A4_KEY: (ARRAY, BOOL)}


def required_keys(architecture: str) -> tuple[str, ...]:
    """The hyperparameters llama.cpp's loader requires of a dense model of the architectures
    GGUF NVFP4 is written for (llama-model.cpp ``load_hparams``: no default)."""
    return (block_count_key(architecture), f"{architecture}.context_length",
            f"{architecture}.embedding_length", f"{architecture}.feed_forward_length",
            head_count_key(architecture))
