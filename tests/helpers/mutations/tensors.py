"""Mutations of the tensors of a safetensors checkpoint: removed, renamed, retyped, reshaped,
added; bad global and activation scales; bad scale bytes; fused sets split."""

from __future__ import annotations

from helpers.mutations.files import (GLOBAL_SUFFIX, INPUT_SUFFIX, PACKED_SUFFIX, a_file, an_entry,
                                     edit_json, edit_tensors, file_holding, layout_tag_of,
                                     linear_modules, tensor_names, weight_files)
from helpers.mutations.registry import SAFETENSORS, mutation


@mutation("linear-removed", needs_any=SAFETENSORS)
def _(d, rng):
    tag = layout_tag_of(d)
    module = rng.choice(linear_modules(d, GLOBAL_SUFFIX[tag]))
    for path in weight_files(d):
        names = [n for n in tensor_names(path) if n.startswith(module + ".")]
        if names:
            edit_tensors(path, lambda t: [t.pop(n) for n in names])
    index = d / "model.safetensors.index.json"
    if index.exists():
        edit_json(index, lambda doc: doc.__setitem__("weight_map", {
            k: v for k, v in doc["weight_map"].items() if not k.startswith(module + ".")}))
    return f"every tensor of {module} removed"


@mutation("tensor-removed", needs=("single",))
def _(d, rng):
    tag = layout_tag_of(d)
    suffixes = [".weight_scale", GLOBAL_SUFFIX[tag], PACKED_SUFFIX[tag]]
    if linear_modules(d, INPUT_SUFFIX[tag]):  # W4A4: its activation scales too
        suffixes.append(INPUT_SUFFIX[tag])
    path, name = file_holding(d, rng.choice(suffixes), rng)
    if name.endswith(".weight") and tag == "modelopt":
        name = rng.choice([n for n in tensor_names(path) if n.endswith(".weight_scale_2")])
    edit_tensors(path, lambda t: t.pop(name))
    return f"{name} removed"


@mutation("tensor-renamed", needs=("single",))
def _(d, rng):
    path = a_file(d, rng)
    name = an_entry(path, rng)
    new = name[:-1] + ("x" if name[-1] != "x" else "y")
    edit_tensors(path, lambda t: t.__setitem__(new, t.pop(name)))
    return f"{name} -> {new}"


@mutation("tensor-retyped", needs=("single",))
def _(d, rng):
    import torch
    tag = layout_tag_of(d)
    suffix = rng.choice([".weight_scale", GLOBAL_SUFFIX[tag]])
    path, name = file_holding(d, suffix, rng)
    dtype = torch.uint8 if suffix == ".weight_scale" else torch.float16

    def retype(t):
        t[name] = t[name].view(torch.uint8) if dtype == torch.uint8 else t[name].to(dtype)
    edit_tensors(path, retype)
    return f"{name} as {dtype}"


@mutation("tensor-reshaped", needs=("single",))
def _(d, rng):
    tag = layout_tag_of(d)
    suffix = rng.choice([".weight_scale", PACKED_SUFFIX[tag], GLOBAL_SUFFIX[tag]])
    path, name = file_holding(d, suffix, rng)
    if tag == "modelopt" and suffix == ".weight":
        path, name = file_holding(d, ".weight_scale", rng)

    def reshape(t):
        x = t[name]
        t[name] = x.reshape(-1) if x.dim() != 1 else x.reshape(1, 1, -1)
        if x.dim() == 2 and x.shape[0] != x.shape[1] and rng.random() < 0.5:
            t[name] = x.T.contiguous()
    edit_tensors(path, reshape)
    return f"{name} reshaped"


@mutation("global-scale-unusable", needs_any=SAFETENSORS)
def _(d, rng):
    import torch
    tag = layout_tag_of(d)
    path, name = file_holding(d, GLOBAL_SUFFIX[tag], rng)
    value = rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e-40, -0.0, 2.0 ** 127])

    def edit(t):
        t[name] = torch.full_like(t[name], value)
    edit_tensors(path, edit)
    return f"{name} = {value!r}"


@mutation("activation-scale-unusable", needs=("w4a4",))
def _(d, rng):
    import torch
    tag = layout_tag_of(d)
    path, name = file_holding(d, INPUT_SUFFIX[tag], rng)
    value = rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e-40])

    def edit(t):
        t[name] = torch.full_like(t[name], value)
    edit_tensors(path, edit)
    return f"{name} = {value!r}"


@mutation("scale-bytes-bad", needs_any=SAFETENSORS)
def _(d, rng):
    import torch
    path, name = file_holding(d, ".weight_scale", rng)
    packed = name[: -len(".weight_scale")] + PACKED_SUFFIX[layout_tag_of(d)]
    kinds = ["nan", "negative"] + (["zero-under-codes"] if packed in tensor_names(path) else [])
    kind = rng.choice(kinds)

    def edit(t):
        raw = t[name].view(torch.uint8).clone()
        r, c = rng.randrange(raw.shape[0]), rng.randrange(raw.shape[1])
        raw[r, c] = {"nan": rng.choice([0x7F, 0xFF]), "negative": int(raw[r, c]) | 0x80,
                     "zero-under-codes": 0x00}[kind]
        if kind == "zero-under-codes":  # a code that is not zero in the group
            codes = t[packed].clone()
            codes[r, 8 * c] = 0x11
            t[packed] = codes
        t[name] = raw.view(torch.float8_e4m3fn)
    edit_tensors(path, edit)
    return f"{name}: a {kind} scale byte"


@mutation("fused-set-split", needs_any=SAFETENSORS, repaired_by_convert=True)
def _(d, rng):
    tag = layout_tag_of(d)
    member = rng.choice([m for m in ("k_proj", "self.key", "up_proj")
                         if any(n.endswith(m + GLOBAL_SUFFIX[tag]) for p in weight_files(d)
                                for n in tensor_names(p))])
    path, name = file_holding(d, member + GLOBAL_SUFFIX[tag], rng)

    def edit(t):
        t[name] = t[name] * 2  # the same codes and bytes under another s_g
    edit_tensors(path, edit)
    return f"{name} doubled (its fused set no longer shares one)"


@mutation("linear-added", needs=("single",))
def _(d, rng):
    tag = layout_tag_of(d)
    module = rng.choice(linear_modules(d, GLOBAL_SUFFIX[tag]))
    extra = rng.choice(["model.layers.9.mlp.up_proj", "model.extra_proj",
                        module.replace("layers.0.", "layers.7.")])
    if extra == module:
        extra = "model.layers.9.mlp.up_proj"
    path = weight_files(d)[0]

    def edit(t):
        for name in [n for n in list(t) if n.startswith(module + ".")]:
            t[extra + name[len(module):]] = t[name].clone()
    edit_tensors(path, edit)
    return f"{module}'s tensors copied as {extra}"


@mutation("tensor-unknown-added", needs=("single",))
def _(d, rng):
    import torch
    path = weight_files(d)[0]
    name = rng.choice(["model.extra.weight", "model.layers.0.mlp.extra_bias", "foo"])
    edit_tensors(path, lambda t: t.__setitem__(name, torch.zeros(4, dtype=torch.float32)))
    return f"{name} added"
