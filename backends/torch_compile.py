"""The fused path of the torch backend: ``torch.compile`` of the kernels' pure functions
(``torch_kernels.objective_graph`` and ``encode_graph``), trusted only after checking them
against the eager kernels.

Inductor is told not to contract floating point (``-ffp-contract=off``, no unsafe math), and
its vectorised code applies one IEEE operation per torch op (``at::vec`` operators, no
``fmadd``; checked by reading the generated C++ for torch 2.13). Each new input shape is checked
once against the eager implementation, on the real inputs and on a probe of exact E2M1 ties and
their one-ulp neighbours. Any mismatch turns the fused path off for the backend that owns it
(reason in ``FusedPath.status()``); so does a failure to compile before any shape has worked (no
C++ compiler, old torch); a later failure (e.g. dynamo's recompile limit) only sends that shape
to the eager path.

All the state (what compiled, what was verified, why the path is off) belongs to one
``FusedPath``, owned by one ``TorchBackend``: nothing here is process-global.
"""

from __future__ import annotations

import os

from . import torch_kernels as kernels

# Layers of at least COMPILE_MIN_GROUPS groups use the fused path, in blocks of
# COMPILE_BLOCK_GROUPS (one compiled shape per layer width, K and h/no h).
# HSCALE_TORCH_COMPILE=0 turns it off, =1 forces it for any layer size.
COMPILE_MIN_GROUPS = 1 << 16
COMPILE_BLOCK_GROUPS = 16384


def inductor_config(device_type: str = "cpu"):
    """Inductor settings for exact kernels. CPU: no floating-point contraction, no unsafe math,
    single-threaded kernels (the caller runs blocks on worker threads) and the C++ wrapper,
    which releases the GIL while the graph runs. CUDA: Triton told not to fuse a multiply and
    an add (``emulate_precision_casts`` turns off its ``enable_fp_fusion``) and, where this
    torch has the switch, not to flush float32 subnormals (the float32 weights are widened in
    the kernel)."""
    import torch._inductor.config as inductor_config
    if device_type == "cuda":
        settings = {"emulate_precision_casts": True}
        if hasattr(getattr(inductor_config, "eager_numerics", None), "disable_ftz"):
            settings["eager_numerics.disable_ftz"] = True
        return inductor_config.patch(settings)
    return inductor_config.patch({"cpp.enable_floating_point_contract_flag": "off",
                                  "cpp.enable_unsafe_math_opt_flag": False,
                                  "cpp.threads": 1, "cpp_wrapper": True})


class CompiledKernel:
    """``torch.compile`` of one pure function of torch ops, guarded by its eager twin."""

    def __init__(self, path: "FusedPath", graph, probe):
        self.path = path
        self.graph = graph
        self.probe = probe  # (torch, args) -> probe args of the same shapes
        self.fn = None
        self.verified = set()  # input shapes checked against eager
        self.failed = {}  # input shapes that did not compile (e.g. past dynamo's recompile limit)

    def __call__(self, torch, args, eager, may_compile=True):
        """``graph(*args)`` compiled, if enabled and verified for these shapes, else
        ``eager(*args)``. Only a caller with ``may_compile`` (the main thread) compiles and
        verifies a new shape; worker threads use what is verified or fall back to eager."""
        if self.path.disabled:
            return eager(*args)
        key = tuple((None if a is None else (tuple(a.shape), a.dtype, a.device.type))
                    for a in args)
        fresh = key not in self.verified
        if fresh and (not may_compile or key in self.failed):
            return eager(*args)
        try:
            if self.fn is None:
                self.fn = torch.compile(self.graph, dynamic=False, fullgraph=True)
            got = self.fn(*args)  # under inductor_config(), entered once per call
            if fresh:
                probe_args = self.probe(torch, args)
                got_probe = self.fn(*probe_args)
        except Exception as exc:  # no compiler, unsupported torch, too many shapes, ...
            reason = f"torch.compile failed: {type(exc).__name__}: {exc}"
            if self.verified:  # it worked for other shapes: only this one goes eager
                self.failed[key] = reason
            else:
                self.path.disabled = reason
            return eager(*args)
        if fresh:
            want = eager(*args).clone()
            want_probe = eager(*probe_args).clone()
            if not (torch.equal(got.to(want.dtype), want)
                    and torch.equal(got_probe.to(want.dtype), want_probe)):
                self.path.disabled = "the compiled function differs from the eager one"
                return want
            self.verified.add(key)
        return got


class FusedPath:
    """The two compiled kernels of one backend, and whether the fused path is on."""

    def __init__(self, option: bool | None):
        self.option = option  # None: by layer size; False: never; True: any layer
        self.disabled = None  # reason, once the path was turned off
        self.objective = CompiledKernel(self, kernels.objective_graph, kernels.objective_probe)
        self.encode = CompiledKernel(self, kernels.encode_graph, kernels.encode_probe)

    def wanted(self, groups: int) -> bool:
        env = os.environ.get("HSCALE_TORCH_COMPILE", "")
        if self.option is False or env == "0" or self.disabled:
            return False
        if self.option is True or env == "1":
            return True
        return groups >= COMPILE_MIN_GROUPS

    def verified_shapes(self) -> int:
        return len(self.objective.verified) + len(self.encode.verified)

    def status(self) -> str:
        """One line on the fused path: its policy and, once used, its state."""
        env = os.environ.get("HSCALE_TORCH_COMPILE", "")
        if self.disabled:
            return f"fused path off ({self.disabled})"
        if self.option is False or env == "0":
            return "fused path off (HSCALE_TORCH_COMPILE=0)" if env == "0" else \
                "fused path off (compile=False)"
        policy = ("any layer" if self.option is True or env == "1"
                  else f"layers of >= {COMPILE_MIN_GROUPS} groups")
        return (f"fused path (torch.compile) for {policy}, {self.verified_shapes()} "
                "shape(s) verified")
