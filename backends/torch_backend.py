"""The ``torch`` (CPU) and ``torch-cuda`` backends, bit-identical to ``hscale.reference`` (profile
``exact``).

``quantize`` (numpy in and out) and ``quantize_on_device`` (torch tensors in and out, the
API for a model quantizer whose weights are already on the device) run the whole-tensor
pipeline of ``torch_tensor``: validation is the reference's, then every step (initial bytes,
4over6, the window's objectives, the first minimum, zero groups, codes, packing) runs as
vectorised torch ops on the backend's device, block by block, with nothing copied to the host
but one scalar (the tensor's amax).

The reference's step methods are replaced here too, for the callers that run the steps
themselves (GPTQ's ``group_quantizer``, the report's ``layer_quantizer``):

- ``load_groups``: the block stays in the weight's own dtype (no float64 copy on the host);
- ``group_maxima``: ``torch.aminmax`` per group;
- ``candidate_objectives`` (the 4over6 pair) and ``search`` (the window): every candidate's
  objective of every group at once, by the eager kernels of ``torch_kernels``, whose exactness
  arguments sit beside them; the search takes the first minimum on the device;
- ``encode``: the final element codes, by the same kernels;
- ``map_blocks``: blocks of rows on ``torch.get_num_threads()`` worker threads, kept for the
  process (``BlockWorkers``).

Speed (CPU). Each block goes to one of the Python worker threads; each thread runs its torch ops
single-threaded. Per-op parallelism (torch's intra-op OpenMP) was slower here: a block is dozens
of small ops, each paying a fork/join and waiting for the slowest core, which is ruinous when
another process holds a core; whole blocks from a shared queue are not. Large layers (at least
``torch_compile.COMPILE_MIN_GROUPS`` groups) go through the fused walk (``torch_walk``: the
whole pipeline of a block in one graph compiled ahead of time, rows and groups per row dynamic,
``torch_aot``); the first call on a machine compiles it (a minute or two), later processes load
it from the disk cache (``torch_compile.fused_cache_dir``) in milliseconds.
"""

from __future__ import annotations

import os
import threading

import ml_dtypes
import numpy as np

from hscale import __version__
from hscale.backends import CAPABILITIES
from hscale.reference import (E2M1_VALUES, SCALE_BYTE_VALUES, QuantizedWeight, Quantizer,
                              compute_global_scale, validation)
from hscale.reference.constants import DEFAULT_K, DEFAULT_SCALE_CEILING, DEFAULT_U
from hscale.reference.gptq import damped_hessian
from hscale.reference.quantize import Options, check_objectives_h

from . import gemm as gemm_kind
from . import torch_gemm
from . import torch_kernels as kernels
from .torch_compile import COMPILE_BLOCK_GROUPS, FusedPath
from .torch_tensor import TensorRun, to_host

GROUP = kernels.GROUP
# Work per block, in groups (each group is K*16 float64 elements in two buffers). The CPU figure
# keeps a block's two work buffers (2 x 4 MiB at K = 16) near the L2/L3 caches of a small
# machine; a GPU wants far larger launches.
CPU_CHUNK_GROUPS = 2048
CUDA_CHUNK_GROUPS = 1 << 17
MIN_WALK_BLOCK_GROUPS = 1024  # a fused walk's block: below this the call's overhead shows


def _import_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


class BlockWorkers:
    """The CPU worker threads that every call's blocks run on, each thread's torch ops
    single-threaded: one pool per thread count, made on first use and kept for the process. A
    pool per call cost each layer its threads' start-up (2-6 ms: a third of the walk of one of
    SmolLM2's 576 x 576 layers, docs/performance.md). A forked child makes its own (the
    parent's threads do not exist in it, and a pool carried over would never run its blocks).
    No pool is ever shut down, so a call on another thread never finds its pool closed."""

    def __init__(self):
        self._lock = threading.Lock()
        self._pools: dict = {}  # thread count -> ThreadPoolExecutor
        self._pid = os.getpid()  # the process the pools' threads belong to

    def pool(self, torch, workers: int):
        from concurrent.futures import ThreadPoolExecutor
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's threads are not here
                self._pools, self._pid = {}, os.getpid()
            pool = self._pools.get(workers)
            if pool is None:
                pool = self._pools[workers] = ThreadPoolExecutor(
                    max_workers=workers, thread_name_prefix="hscale-torch-blocks",
                    initializer=torch.set_num_threads, initargs=(1,))
            return pool


BLOCK_WORKERS = BlockWorkers()


class TorchBackend:
    """H-Scale NVFP4 quantization in torch, on one device ("cpu" or "cuda:0"), and the GEMM
    (``torch_gemm``)."""

    capabilities = CAPABILITIES
    kinds = gemm_kind.KINDS
    gemm_model = gemm_kind.GEMM_MODEL
    gemm_out_dtypes = gemm_kind.GEMM_OUT_DTYPES
    gemm_activations = gemm_kind.GEMM_ACTIVATIONS
    gemm_scale_layout = gemm_kind.GEMM_SCALE_LAYOUT
    hands_back_objectives = True  # quantize(objectives=True): the search's group objectives

    def __init__(self, device: str = "cpu", chunk_groups: int | None = None,
                 compile: bool | None = None):
        self.device_kind = "cuda" if device.startswith("cuda") else "cpu"
        self.device_name = device
        self.name = "torch-cuda" if self.device_kind == "cuda" else "torch"
        self.chunk_groups = chunk_groups or (CUDA_CHUNK_GROUPS if self.device_kind == "cuda"
                                             else CPU_CHUNK_GROUPS)
        # None: the fused walk for large layers on the CPU, on CUDA only where
        # HSCALE_TORCH_COMPILE=1 asks for it; False: never; True: any layer (on CUDA:
        # inductor's Triton kernels, checked as on the CPU).
        self.fused = FusedPath(compile, self.device_kind)

    @property
    def version(self) -> str:
        torch = _import_torch()
        lib = f"torch {torch.__version__}" if torch is not None else "torch not installed"
        extra = f"; {self.fused.status()}" if torch is not None else ""
        return f"hscale.backends.torch_backend {__version__}, {lib}{extra}"

    def available(self):
        torch = _import_torch()
        if torch is None:
            return False, "torch is not installed"
        if self.device_kind == "cuda" and not torch.cuda.is_available():
            return False, ("torch-cuda backend needs a CUDA device: "
                           "torch.cuda.is_available() is False")
        return True, ""

    def require_available(self) -> None:
        """A RuntimeError saying why, where this backend cannot run here."""
        ok, why = self.available()
        if not ok:
            raise RuntimeError(f"backend {self.name!r} is not available: {why}")

    def __repr__(self):
        return f"<{self.name} backend on {self.device_name}>"

    def quantize(self, weight, hessian_diag=None, **options):
        """``hscale.reference.quantize``'s signature and result, computed in torch."""
        self.require_available()
        return TorchQuantizer(self).quantize(weight, hessian_diag, **options)

    def gemm(self, a, b, *, out_dtype="float32"):
        self.require_available()
        return torch_gemm.gemm(_import_torch(), self.device_name, a, b, out_dtype)

    def quantize_on_device(self, weight, hessian_diag=None, **options):
        """``quantize`` for a weight that is already a torch tensor on this backend's device
        (float32, float16 or bfloat16, (m, n)): the arguments checked as the reference checks
        them, the weight's values on the device (NVFP4-IN-1); h (or hscale-block's blocks) as
        numpy or a tensor. Returns a ``DeviceResult`` (the cupy backend's record) of tensors on
        the device: ``packed`` (m, n/2), ``scale_bytes`` and ``initial_bytes`` (m, n/16), all
        uint8, ``codes`` (m, n) only with ``codes=True``, ``global_scale``, and with
        ``objectives=True`` the group objectives (the reference's ``quantize(objectives=)``);
        ``hscale.backends.torch_tensor.to_host(result)`` gives the reference's record."""
        self.require_available()
        return TorchQuantizer(self).quantize_on_device(weight, hessian_diag, **options)

    def layer_quantizer(self, groups: int):
        """The reference's steps in torch (the eager kernels), blocks on worker threads, for a
        layer of ``groups`` groups: for a caller that runs the steps itself, such as the
        quantization report's errors (``hscale.evaluation.quality.rounding_quality``)."""
        self.require_available()
        return TorchQuantizer(self).fit(groups)

    def group_quantizer(self):
        """The reference's steps with the objectives in torch, for a pipeline that chooses the
        bytes of float64 groups itself (``hscale.reference.gptq_quantize(group_quantizer=)``):
        bit-identical to the reference's (``torch_kernels.eager_objectives(wide=True)``)."""
        self.require_available()
        return TorchGroupQuantizer(self)

    def gptq_inverse_factor(self, H: np.ndarray, damp: float) -> np.ndarray:
        """GPTQ's upper factor ``U`` (``U^T U`` the inverse of the reference's
        ``damped_hessian(H, damp)``) as the reference's ``inverse_cholesky_factor`` defines
        it, for ``gptq_quantize(inverse_factor=)``.

        The inverse comes from the damped matrix's Cholesky factor (LAPACK potrf + potri, about
        n^3 operations where the reference's general inverse takes 2 n^3), on the device, in
        float64: 2x faster on a 14336-column layer on two cores. It equals the reference's up
        to floating-point rounding, which HSCALE-GPTQ-1 leaves unspecified; the sweep that uses
        it, and every group's bytes, are the reference's.
        """
        self.require_available()
        import torch
        # on the CPU the tensor shares the damped array's memory (no second n x n copy)
        damped = torch.from_numpy(damped_hessian(H, damp)).to(self.device_name)
        # each n x n float64 matrix freed as soon as it is done with (GPTQ's peak memory)
        lower, info = torch.linalg.cholesky_ex(damped)
        del damped
        if int(info) != 0:
            raise np.linalg.LinAlgError("Matrix is not positive definite")
        inverse = torch.cholesky_inverse(lower)
        del lower
        factor, info = torch.linalg.cholesky_ex(inverse, upper=True)
        del inverse
        if int(info) != 0:
            raise np.linalg.LinAlgError("Matrix is not positive definite")
        return factor.cpu().numpy()


class TorchQuantizer(Quantizer):
    """One call of the torch backend: the reference pipeline with its hot steps in torch."""

    def __init__(self, backend: TorchBackend):
        import torch
        self.torch = torch
        self.backend = backend
        self.device = torch.device(backend.device_name)
        self.block_groups = max(1, int(backend.chunk_groups))
        self.use_compile = False
        self.local = threading.local()  # per worker thread: buffers, the block's |w|^T
        self.main_thread = threading.get_ident()  # the thread that may compile
        self.scale_table = None  # s_g * value of bytes 0x00..0x7E, once s_g is known
        self.h_columns_cache = {}

    # -- the call ------------------------------------------------------------------------------
    def validate(self, *args):
        checked = super().validate(*args)
        self.fit(checked[0].size // GROUP)
        return checked

    def fit(self, groups: int) -> "TorchQuantizer":
        """The fused walk for a layer of ``groups`` groups where it pays (CPU, large) or where
        asked for (CUDA), in blocks of about ``COMPILE_BLOCK_GROUPS`` groups on the CPU."""
        self.use_compile = self.backend.fused.wanted(groups)
        if self.use_compile and self.device.type == "cpu":
            # at least two blocks per worker thread, so that a small layer uses every core
            # and a busy core does not hold the others up at the end
            workers = max(1, self.torch.get_num_threads())
            self.block_groups = min(COMPILE_BLOCK_GROUPS,
                                    max(MIN_WALK_BLOCK_GROUPS, -(-groups // (2 * workers))))
        return self

    # -- the whole tensor (torch_tensor) -------------------------------------------------------
    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs",
                 K=DEFAULT_K, U=DEFAULT_U, scale_ceiling=DEFAULT_SCALE_CEILING,
                 global_scale=None, objectives=False, objectives_h=None) -> QuantizedWeight:
        """The reference's signature and result: validated by the reference, quantized as one
        tensor on the device, the result copied back; ``objectives`` as the reference's (the
        search's own where it ranked by that weighting, ``torch_tensor.ObjectiveRun``)."""
        weight, h, options, given_scale = self.validate(weight, hessian_diag, method, init, K,
                                                        U, scale_ceiling, global_scale)
        scoring = _objective_request(objectives, objectives_h, weight.shape[1])
        tensor = kernels.as_tensor(self.torch, weight).to(self.device)
        s_g = given_scale if given_scale is not None else self.tensor_global_scale(tensor,
                                                                                   options)
        return to_host(TensorRun(self, tensor, h, options, s_g, objectives=scoring).run())

    def quantize_on_device(self, weight, hessian_diag=None, *, method="hscale", init="maxabs",
                           K=DEFAULT_K, U=DEFAULT_U, scale_ceiling=DEFAULT_SCALE_CEILING,
                           global_scale=None, codes=False, objectives=False,
                           objectives_h=None):
        """``TorchBackend.quantize_on_device``: the reference's checks in its order (NVFP4-IN-1
        .. -6), the weight's values checked on the device."""
        torch = self.torch
        method = validation.check_choice("method", method, validation.METHODS)
        init = validation.check_choice("init", init, validation.INITS)
        if not isinstance(weight, torch.Tensor):
            raise ValueError(f"weight: expected a torch tensor on {self.device}, got "
                             f"{type(weight).__name__}; numpy weights go to quantize() "
                             "(spec NVFP4-IN-1)")
        if weight.device != self.device and not (self.device.index is None
                                                 and weight.device.type == self.device.type):
            raise ValueError(f"weight: on {weight.device}, this backend ({self.backend.name}) "
                             f"quantizes on {self.device}; move it with .to('{self.device}') "
                             "(spec NVFP4-IN-1)")
        validation.check_weight_layout(_numpy_dtype(weight.dtype),
                                       tuple(weight.shape))  # NVFP4-IN-1: dtype and shape
        K, U = validation.check_window(K, U)
        scale_ceiling = validation.check_scale_ceiling(scale_ceiling)
        h = validation.check_method_hessian(_host(hessian_diag), method, weight.shape[1])
        if global_scale is not None:
            global_scale = validation.check_global_scale(global_scale)
        scoring = _objective_request(objectives, _host(objectives_h), weight.shape[1])
        weight = weight.detach().contiguous()
        options = Options(method, init, K, U, scale_ceiling)
        self.fit(weight.numel() // GROUP)
        amax = self.tensor_amax(weight)  # NVFP4-IN-1: finite, checked on the device
        if not np.isfinite(amax):
            validation.check_weight_finite(_host(weight))  # names the first bad index
            raise AssertionError("torch.aminmax saw a non-finite weight that numpy did not")
        s_g = (global_scale if global_scale is not None
               else compute_global_scale(amax, options.scale_ceiling))  # NVFP4-GS-1, -2
        return TensorRun(self, weight, h, options, s_g, codes=codes, objectives=scoring).run()

    def tensor_amax(self, tensor) -> float:
        """max |w| of a tensor by one ``torch.aminmax`` pass (exact in its own dtype; NaN or
        infinite if an element is)."""
        low, high = self.torch.aminmax(tensor)
        return max(float(high), -float(low))

    def tensor_global_scale(self, tensor, options) -> np.float32:
        return compute_global_scale(self.tensor_amax(tensor), options.scale_ceiling)

    def map_blocks(self, function, blocks, first=()) -> None:
        """Blocks on the process's worker threads (CPU, ``BLOCK_WORKERS``), each running
        single-threaded torch ops, from a shared queue; on CUDA in this thread. ``first``:
        blocks to run before the others, in this thread (the fused walk's new block shapes,
        whose library is built or loaded and which are checked here; the workers then only run
        it). The process-wide intra-op thread count
        is restored."""
        torch = self.torch
        workers = torch.get_num_threads() if self.device.type == "cpu" else 1
        for block in first:
            function(block)
        if workers <= 1 or len(blocks) <= 1:
            for block in blocks:
                function(block)
            return
        saved = torch.get_num_threads()
        try:
            pool = BLOCK_WORKERS.pool(torch, workers)
            for future in [pool.submit(function, b) for b in blocks]:
                future.result()
        finally:
            torch.set_num_threads(saved)

    # -- hot steps -----------------------------------------------------------------------------
    def global_scale(self, weight, options) -> np.float32:
        """The reference's s_g (NVFP4-GS-1) of the tensor's amax, taken by one multi-threaded
        ``torch.aminmax`` pass (exact in the weight's own dtype) instead of numpy's two."""
        return self.tensor_global_scale(kernels.as_tensor(self.torch, weight), options)

    def load_groups(self, block_weight: np.ndarray) -> np.ndarray:
        """The block's groups (rows, group_cols, 16) in the weight's own dtype: the kernels
        widen to float64 themselves."""
        rows, cols = block_weight.shape
        return block_weight.reshape(rows, cols // GROUP, GROUP)

    def group_maxima(self, groups) -> np.ndarray:
        low, high = self.torch.aminmax(self._tensor(groups), dim=1)
        # max(max w, -min w) = max |w| (a group of zeros may give -0.0, equal to 0 below).
        amax = self.torch.maximum(high, low.neg()).to(self.torch.float64)  # widened exactly
        return amax.cpu().numpy().reshape(np.shape(groups)[:-1])

    def candidate_objectives(self, groups, h, candidates, s_g) -> np.ndarray:
        """E (..., k) of every group at every candidate byte; the array is the thread's work
        buffer, valid until the thread's next call (the pipeline uses it at once)."""
        w, scale = self._candidate_scales(groups, candidates, s_g)
        errors = self._objectives(w, groups, scale, self._h_columns(h, groups, w.shape[0]))
        return errors.cpu().numpy().reshape(candidates.shape)

    def candidate_objectives_weighted(self, groups, weightings, candidates, s_g) -> list:
        """The objectives under each weighting from one rounding of the candidates
        (``kernels.eager_objectives_weighted``): the report's errors score two candidates with
        h and with h = 1, and the rounding is most of each call."""
        w, scale = self._candidate_scales(groups, candidates, s_g)
        errors = kernels.eager_objectives_weighted(
            self.torch, self._abs_t(w, groups), scale,
            [self._h_columns(h, groups, w.shape[0]) for h in weightings], self._buffers(),
            wide=w.dtype == self.torch.float64)
        return [e.cpu().numpy().reshape(candidates.shape) for e in errors]

    def _candidate_scales(self, groups, candidates, s_g):
        """The groups as a (G, 16) tensor and each candidate byte's effective scale (G, k)."""
        w = self._tensor(groups)
        G, k = w.shape[0], candidates.shape[-1]
        index = self.torch.from_numpy(np.ascontiguousarray(candidates).reshape(G, k))
        return w, self._scales(s_g).take(index.to(self.device).long())  # exact

    def search(self, groups, h, initial, s_g, context) -> np.ndarray:
        """The reference's search (window, objectives, first minimum) on the device: the scales
        of each initial byte's window are one row of a (127, K) table, and ``torch.min``
        returns the first minimal index along the candidates in priority order, so an exact tie
        keeps the earlier one (HSCALE-ARGMIN-1; tests/backends/test_backends_smoke.py checks torch.min)."""
        torch = self.torch
        window = context["window"]  # (127, K) uint8, the reference's window table
        K = window.shape[1]
        if "torch_window" not in context:
            table = torch.from_numpy(window.astype(np.int64)).to(self.device)
            context["torch_window"] = (table, self._scales(s_g)[table].contiguous())
        window_bytes, window_scales = context["torch_window"]
        w = self._tensor(groups)
        c0 = torch.from_numpy(np.ascontiguousarray(initial, np.int64).reshape(-1)).to(self.device)
        scale = window_scales.index_select(0, c0)  # (G, K)
        errors = self._objectives(w, groups, scale, self._h_columns(h, groups, w.shape[0]))
        rank = torch.min(errors, dim=1).indices  # HSCALE-ARGMIN-1: the first minimum
        chosen = torch.take(window_bytes, c0 * K + rank)
        return chosen.to(torch.uint8).cpu().numpy().reshape(np.shape(initial))

    def encode(self, groups, scale) -> np.ndarray:
        if np.asarray(groups).dtype == np.float64:
            # GPTQ's 53-bit weights: the division in the kernels is exact only for 24 bits
            return super().encode(groups, scale)
        torch = self.torch
        w = self._tensor(groups)
        s = kernels.as_tensor(torch, np.broadcast_to(scale, np.shape(groups)[:-1] + (1,))
                              .reshape(-1).astype(np.float64)).to(self.device)
        codes = kernels.eager_encode(torch, w, s, self._buffers())
        return codes.to(torch.uint8).cpu().numpy().reshape(np.shape(groups))

    def block_objective(self, groups, blocks, codes, scale) -> np.ndarray:
        """HSCALE-BLOCK-1 in torch (``torch_kernels.block_objectives``), bit-identical to the
        reference's ``block_error``."""
        torch = self.torch
        w = torch.from_numpy(np.asarray(groups, dtype=np.float64)).to(self.device)
        values = torch.from_numpy(E2M1_VALUES[np.asarray(codes).astype(np.intp)]).to(self.device)
        s = torch.from_numpy(np.asarray(scale, dtype=np.float64)).to(self.device)
        b = torch.from_numpy(np.ascontiguousarray(blocks, dtype=np.float64)).to(self.device)
        return kernels.block_objectives(torch, w, values, s, b).cpu().numpy()

    # -- helpers -------------------------------------------------------------------------------
    def _objectives(self, w, groups, scale, h_t):
        """E (G, k) by the eager kernel; its ``wide`` form for GPTQ's error-compensated float64
        weights (``group_quantizer``), which have 53 significant bits, not 24."""
        wide = w.dtype == self.torch.float64
        return kernels.eager_objectives(self.torch, self._abs_t(w, groups), scale, h_t,
                                        self._buffers(), wide=wide)

    def _buffers(self) -> kernels.Buffers:
        buffers = getattr(self.local, "buffers", None)
        if buffers is None:
            buffers = self.local.buffers = kernels.Buffers(self.torch, self.device)
        return buffers

    def _tensor(self, groups):
        """The groups (G, 16) as a tensor on the device, in their own dtype (a view of the
        numpy block on the CPU)."""
        return kernels.as_tensor(self.torch, np.asarray(groups).reshape(-1, GROUP)).to(self.device)

    def _scales(self, s_g):
        if self.scale_table is None:  # exact: 24 x 4 significant bits
            self.scale_table = self.torch.from_numpy(SCALE_BYTE_VALUES * float(s_g)).to(self.device)
        return self.scale_table

    def _abs_t(self, w, groups):
        """|w| as float64 (16, G) in the thread's buffer; kept for the block, whose 4over6
        choice and search both get the same groups array. The cache is keyed by that array's
        identity, and holds it: a key of address and shape would match a later block's array
        allocated where a freed one was (blocks with the same number of zero groups did so)."""
        G = w.shape[0]
        aw_t = self._buffers().get("aw", GROUP * G).view(GROUP, G)
        if getattr(self.local, "aw_groups", None) is not groups:
            aw_t.copy_(w.t()).abs_()
            self.local.aw_groups = groups
        return aw_t

    def _h_columns(self, h, groups, G):
        """h as (16, G) float64 on the device, or None for h = 1 (1 * (d*d) is d*d)."""
        if h is None or (np.ndim(h) == 1 and np.all(np.asarray(h) == 1)):
            return None
        torch = self.torch
        h = np.asarray(h, dtype=np.float64)
        if h.ndim == 2 and np.ndim(groups) == 3 and h.shape[0] == np.shape(groups)[1]:
            # A block of whole rows: the row's pattern repeats for every row, cached per call.
            # Keyed by the identity of the object owning h's memory, which the entry holds: an
            # address alone could be reused by another array once the first is freed (the
            # pattern behind 576b902), an owner held alive cannot.
            owner = h if h.base is None else h.base
            key = (id(owner), h.__array_interface__["data"][0], h.strides, h.shape, G)
            entry = self.h_columns_cache.get(key)
            if entry is None or entry[0] is not owner:
                rows = G // h.shape[0]
                entry = (owner, torch.from_numpy(np.ascontiguousarray(h)).t().repeat(1, rows)
                         .contiguous().to(self.device))
                self.h_columns_cache[key] = entry
            return entry[1]
        full = np.broadcast_to(h, np.shape(groups)).reshape(G, GROUP)
        return kernels.as_tensor(torch, full.T).to(self.device)

    def _may_compile(self) -> bool:
        return threading.get_ident() == self.main_thread


class TorchGroupQuantizer(TorchQuantizer):
    """``TorchQuantizer`` for GPTQ's group step. GPTQ asks for one group column at a time
    ((rows, 16) weights, some hundred kB of work), where torch's intra-op threads cost more in
    fork and join than they save (the MiniLM GPTQ run: 19 s of quantization on two threads,
    13 s on one), so each call runs on one thread and the process's thread count is restored."""

    def select_bytes(self, groups, h, s_g, options, context):
        saved = self.torch.get_num_threads()
        self.torch.set_num_threads(1)
        try:
            return super().select_bytes(groups, h, s_g, options, context)
        finally:
            self.torch.set_num_threads(saved)


def _objective_request(objectives: bool, objectives_h, cols: int):
    """``TensorRun``'s ``objectives``: None, or ``(h,)`` with the caller's h checked as the
    reference checks it (NVFP4-IN-2), None for h = 1 alone."""
    if not objectives:
        return None
    return (check_objectives_h(objectives_h, cols),)


def _numpy_dtype(torch_dtype):
    """The numpy dtype of a torch dtype, as the reference's checks name it (NVFP4-IN-1):
    bfloat16 is ml_dtypes'; a dtype numpy lacks is named as torch names it."""
    torch = _import_torch()
    if torch_dtype == torch.bfloat16:
        return np.dtype(ml_dtypes.bfloat16)
    try:
        return torch.empty(0, dtype=torch_dtype).numpy().dtype
    except (TypeError, RuntimeError):
        return torch_dtype


def _host(value):
    """A tensor's values as numpy, bit for bit, for the reference's checks; else unchanged."""
    if type(value).__module__.split(".")[0] != "torch":
        return value
    tensor = value.detach().cpu().contiguous()
    if tensor.dtype == _import_torch().bfloat16:
        return tensor.view(_import_torch().int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def create_cpu():
    return TorchBackend("cpu")


def create_cuda():
    return TorchBackend("cuda:0")
