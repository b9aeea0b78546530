"""The ``torch`` (CPU) and ``torch-cuda`` backends: the H-Scale search vectorised over groups and
all K candidates, bit-identical to ``hscale.reference`` (profile ``exact``).

Validation, the global scale, the initial bytes, the window, packing and the result come from the
reference (``hscale.backends._common``). This module replaces the two hot loops:

1. the candidate search: for every group and every candidate scale, the E2M1 rounding of
   ``|w| / s`` and the objective ``E = pairwise_sum(h * (d * d))``, ``d = |w| - q*s``;
2. the final element encoding with the chosen scale.

Exactness (HSCALE-OBJ-1, NVFP4-E2M1-2), all in float64:

* ``x = |w| / s`` is rounded, but it never crosses or lands on an E2M1 midpoint or on a grid
  point it does not equal. ``|w|`` has at most 24 significant bits, ``s = s_g * ladder[c]`` at
  most 28, and a midpoint or grid point ``m`` at most 3, so ``|w| - m*s`` is either 0 or at least
  one unit of the coarser of the two last places, which is a relative distance of more than
  2^-29 from ``m*s``. The float64 quotient is within 2^-53 (relative) of the exact one, and
  rounding is monotone, so ``fl(x) > m`` iff ``|w|/s > m``, ``fl(x) == m`` iff ``|w|/s == m``.
  Rounding ``fl(x)`` on the E2M1 grid therefore gives the code of the exact quotient, which is
  what the reference's division-free threshold form computes.
* The E2M1 rounding of ``x`` (after ``min(x, 6)``, the saturation) is the classic "add a magic
  constant and subtract it": with ``T = clamp(x, 1, 6)`` and ``C = 2^51 * T`` (exact), the unit
  in the last place of ``C`` is 0.5 for x < 2, 1 for 2 <= x < 4 and 2 for x >= 4, which is the
  E2M1 grid spacing there; ``fl(x + C) - C`` is ``x`` rounded to that spacing, ties to even, and
  the subtraction is exact. The sum stays in C's binade because x is never within 2^-29 of 2 or 4
  without being equal (above). A tie (x exactly a midpoint) has ``T`` with at most 3 significant
  bits, so ``C`` is an even multiple of the spacing and "ties to even" in the addition is "ties to
  the even E2M1 code" (0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4). (``alpha=2^51``
  in ``add_``/``sub_`` multiplies exactly, so a fused multiply-add there changes nothing.)
* ``d = |w| - q*s``: ``q*s`` is exact (2 x 28 significant bits), so ``addcmul`` (which may or may
  not fuse the multiply into the add) rounds once, exactly like the reference's separate multiply
  and subtract, and ``|w| - |q|s`` is ``-(w - q s)`` when w < 0 (rounding is sign-symmetric), so
  ``d*d`` is the same number. ``d*d`` and ``h*(d*d)`` are separate multiplies (two roundings, as in
  the reference), and ``E`` is summed by adjacent pairs level by level in the same tree
  ``((e0+e1)+(e2+e3))+...``. torch's CPU and CUDA elementwise kernels are one operation per
  call, so nothing else can be contracted.
* The K candidates sit in priority order 0, +1, -1, ... along the last axis of E (G, K), and
  ``torch.min(E, dim=1)`` returns the first minimal index (documented for torch.min/argmin, and
  tested in tests/test_backends_smoke.py), so an exact tie keeps the earlier candidate
  (HSCALE-ARGMIN-1). E contains no NaN: h >= 0 is finite, d is finite; E may be +inf (h near the
  float64 maximum), and inf == inf ties keep the earlier candidate, as in the reference.
* Subnormal float64 intermediates (tiny h times a tiny d*d) are computed exactly as long as torch
  is not told to flush denormals (``torch.set_flush_denormal(True)`` would break exactness).

Speed (CPU). The layer is cut into blocks of whole rows (or of one row's groups). Each block
goes to one of ``torch.get_num_threads()`` Python worker threads; each thread runs its torch ops
single-threaded (``_Quantizer.run_threaded``). Per-op parallelism (torch's intra-op OpenMP) was
slower here: a block is dozens of small ops, each paying a fork/join and waiting for the slowest
core, which is ruinous when another process holds a core; whole blocks from a shared queue are not.

* Eager path (any layer): the search runs in a (16, G, K) float64 layout, ~10 passes of torch
  elementwise ops per element and candidate (blocks of ``CPU_CHUNK_GROUPS`` groups keep them in
  cache).
* Fused path (layers of at least ``COMPILE_MIN_GROUPS`` groups; ``HSCALE_TORCH_COMPILE=0`` turns
  it off, ``=1`` forces it, or ``TorchBackend(compile=...)``): the same objective and encoding
  written as pure functions (``_objective_graph``, ``_encode_graph``) and compiled by
  ``torch.compile`` (inductor, C++) into one loop each, with floating-point contraction and unsafe
  math off, single-threaded kernels and the C++ wrapper that releases the GIL (so the worker
  threads run them in parallel). Blocks are padded to ``COMPILE_BLOCK_GROUPS`` groups so that a
  layer compiles one shape. Every new shape is checked once, in the calling thread, against the
  eager path on the real block and on a probe of exact ties; a mismatch or a failure to compile
  (no C++ compiler, ...) falls back to the eager path (``fused_status()`` says which and why).
  The first call compiles (tens of seconds; inductor caches on disk for later processes).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from hscale import __version__
from hscale.backends import CAPABILITIES
from hscale.backends import _common as common
from hscale.reference import SCALE_BYTE_VALUES
from hscale.reference.e4m3 import LADDER_FIRST_BYTE
from hscale.reference.initial_scale import range_fitting_byte

GROUP = 16
MAGIC = float(2 ** 51)  # C = 2^51 * clamp(x, 1, 6): ulp(C) is the E2M1 spacing at x
# Work per chunk, in groups (each group is K*16 float64 elements in two buffers). The CPU figure
# keeps a chunk's two work buffers (2 x 4 MiB at K = 16) near the L2/L3 caches of a small machine;
# a GPU wants far larger launches.
CPU_CHUNK_GROUPS = 2048
CUDA_CHUNK_GROUPS = 1 << 17
# The fused (torch.compile) objective on the CPU: layers of at least COMPILE_MIN_GROUPS groups,
# in blocks of COMPILE_BLOCK_GROUPS (one compiled shape per layer width, K and h/no h).
# HSCALE_TORCH_COMPILE=0 turns it off, =1 forces it for any layer size.
COMPILE_MIN_GROUPS = 1 << 16
COMPILE_BLOCK_GROUPS = 16384


def _import_torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _objective_graph(w, scale, h):
    """The objective as one pure function of torch ops, for ``torch.compile`` to fuse into a
    single loop: E (G, k) of the groups ``w`` (G, 16, own dtype) at the scales ``scale``
    (G, k), weighted by ``h`` (16, G) or unweighted (None). The same operations in the same
    order as ``_Worker.eager_objectives`` (there ``addcmul`` and ``add_(alpha=2^51)``, here
    the exact products written out), so the same bits; ``_Compiled`` checks that on every new
    shape before trusting it."""
    import torch
    aw = w.to(torch.float64).abs()  # (G, 16), exact
    terms = []
    for j in range(GROUP):  # written out per element: inductor fuses all 16 into one loop
        a = aw[:, j:j + 1]  # (G, 1)
        x = torch.clamp_max(a / scale, 6.0)
        c = torch.clamp_min(x, 1.0) * MAGIC  # exact
        q = (x + c) - c
        d = a - q * scale  # q*s exact
        e = d * d
        if h is not None:
            e = e * h[j].unsqueeze(1)
        terms.append(e)
    while len(terms) > 1:  # ((e0 + e1) + (e2 + e3)) + ...
        terms = [terms[i] + terms[i + 1] for i in range(0, len(terms), 2)]
    return terms[0]


def _encode_graph(w, scale):
    """E2M1 codes (G, 16), as int32, of the groups ``w`` (G, 16, own dtype) at ``scale`` (G,):
    the same operations as ``_Worker.eager_encode`` (sign bit from ``signbit``, -0.0 too)."""
    import torch
    x = torch.clamp_max(w.to(torch.float64).abs() / scale.unsqueeze(1), 6.0)
    c = torch.clamp_min(x, 1.0) * MAGIC  # exact
    q = (x + c) - c
    magnitude = torch.clamp_max(q, 2.0) + torch.clamp_max(q, 5.0)
    # int32 rather than uint8: inductor vectorises this conversion far better.
    return torch.where(torch.signbit(w), magnitude + 8.0, magnitude).to(torch.int32)


class _Compiled:
    """``torch.compile`` of a pure function of torch ops (inductor, C++ on the CPU), guarded.

    Inductor is told not to contract floating point (``-ffp-contract=off``, no unsafe math),
    and its vectorised code applies one IEEE operation per torch op (``at::vec`` operators, no
    ``fmadd``; checked by reading the generated C++ for torch 2.13). Each new input shape is
    checked once against the eager implementation, on the real inputs and on a probe of exact
    E2M1 ties and their one-ulp neighbours. Any mismatch disables the fused path for the whole
    process (reason in ``disabled`` and ``fused_status()``); so does a failure to compile before
    any shape has worked (no C++ compiler, old torch); a later failure (e.g. dynamo's recompile
    limit) only sends that shape to the eager path.
    """

    def __init__(self, graph, probe):
        self.graph = graph
        self.probe = probe  # (torch, args) -> probe args of the same shapes
        self.fn = None
        self.disabled = None  # reason, once disabled
        self.verified = set()  # input shapes checked against eager
        self.failed = {}  # input shapes that did not compile (e.g. past dynamo's recompile limit)

    @staticmethod
    def config():
        """Inductor settings for exact, thread-friendly kernels: no floating-point contraction,
        no unsafe math, single-threaded kernels (the caller runs blocks on worker threads) and
        the C++ wrapper, which releases the GIL while the graph runs."""
        import torch._inductor.config as inductor_config
        return inductor_config.patch({"cpp.enable_floating_point_contract_flag": "off",
                                      "cpp.enable_unsafe_math_opt_flag": False,
                                      "cpp.threads": 1, "cpp_wrapper": True})

    def __call__(self, torch, args, eager, may_compile=True):
        """``graph(*args)`` compiled, if enabled and verified for these shapes, else
        ``eager(*args)``. Only a caller with ``may_compile`` (the main thread) compiles and
        verifies a new shape; worker threads use what is verified or fall back to eager."""
        if self.disabled or _FUSED_OFF[0]:
            return eager(*args)
        key = tuple((None if a is None else (tuple(a.shape), a.dtype, a.device.type))
                    for a in args)
        fresh = key not in self.verified
        if fresh and (not may_compile or key in self.failed):
            return eager(*args)
        try:
            if self.fn is None:
                self.fn = torch.compile(self.graph, dynamic=False, fullgraph=True)
            got = self.fn(*args)  # under config(), entered once per call by the quantizer
            if fresh:
                probe_args = self.probe(torch, args)
                got_probe = self.fn(*probe_args)
        except Exception as exc:  # no compiler, unsupported torch, too many shapes, ...
            reason = f"torch.compile failed: {type(exc).__name__}: {exc}"
            if self.verified:  # it worked for other shapes: only this one goes eager
                self.failed[key] = reason
            else:
                self.disabled = _FUSED_OFF[0] = reason
            return eager(*args)
        if fresh:
            want = eager(*args).clone()
            want_probe = eager(*probe_args).clone()
            if not (torch.equal(got.to(want.dtype), want)
                    and torch.equal(got_probe.to(want.dtype), want_probe)):
                self.disabled = "the compiled function differs from the eager one"
                _FUSED_OFF[0] = self.disabled
                return want
            self.verified.add(key)
        return got


def _probe_groups(torch, like, G):
    """(w, scale): G groups (G, 16) in the dtype of ``like`` on exact E2M1 ties, grid points, 0,
    -0.0 and a saturating 7 times a per-group scale (G,) with few significant bits (so the
    products are exact in that dtype); every third group nudged one ulp up, every third one
    down (on the integer view, which works for every float dtype). The inputs where a
    contracted or reordered rounding would show."""
    device = like.device
    points = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.5, 1.0, 1.5, 2.0, 3.0,
                           4.0, 7.0, 0.0], dtype=torch.float64, device=device)
    signs = torch.tensor([1.0, -1.0] * 8, dtype=torch.float64, device=device)
    index = torch.arange(G, device=device)
    mantissa = torch.tensor([1.0, 1.125, 1.25, 1.375, 1.5, 1.625, 1.75, 1.875],
                            dtype=torch.float64, device=device)
    scale = mantissa[index % 8] * torch.pow(2.0, (index % 7 - 3).to(torch.float64))
    w = ((points * signs).unsqueeze(0) * scale.unsqueeze(1)).to(like.dtype)  # exact
    w[:, 15] = -0.0
    bits = w.view(_SIGNED[like.dtype])
    step = torch.where(index % 3 == 1, 1, torch.where(index % 3 == 2, -1, 0)).unsqueeze(1)
    nonzero = w != 0  # nudge magnitudes away from / towards zero, never across it
    bits = torch.where(nonzero, bits + step.to(bits.dtype), bits)
    return bits.view(like.dtype).contiguous(), scale


def _objective_probe(torch, args):
    w, scale, h = args
    G, k = scale.shape
    pw, ps = _probe_groups(torch, w, G)
    ratios = torch.pow(2.0, (torch.arange(k, device=w.device) % 5 - 2).to(torch.float64))
    return pw, (ps.unsqueeze(1) * ratios.unsqueeze(0)).contiguous(), h


def _encode_probe(torch, args):
    w, scale = args
    return _probe_groups(torch, w, w.shape[0])


_FUSED_OFF = [None]  # reason, once any fused function is disabled: all go eager together
_COMPILED_OBJECTIVE = _Compiled(_objective_graph, _objective_probe)
_COMPILED_ENCODE = _Compiled(_encode_graph, _encode_probe)


def fused_status() -> str:
    """One line on the fused (torch.compile) CPU path: its policy and, once used, its state."""
    import os
    env = os.environ.get("HSCALE_TORCH_COMPILE", "")
    if _FUSED_OFF[0]:
        return f"fused CPU path off ({_FUSED_OFF[0]})"
    if env == "0":
        return "fused CPU path off (HSCALE_TORCH_COMPILE=0)"
    shapes = len(_COMPILED_OBJECTIVE.verified) + len(_COMPILED_ENCODE.verified)
    policy = ("any layer" if env == "1" else f"layers of >= {COMPILE_MIN_GROUPS} groups")
    return f"fused CPU path (torch.compile) for {policy}, {shapes} shape(s) verified"


def _want_compile(option, groups):
    import os
    env = os.environ.get("HSCALE_TORCH_COMPILE", "")
    if option is False or env == "0" or _FUSED_OFF[0]:
        return False
    if option is True or env == "1":
        return True
    return groups >= COMPILE_MIN_GROUPS


_SIGNED = {}  # float dtype -> signed integer dtype of the same width (filled on first use)


def _as_tensor(torch, array: np.ndarray):
    """A torch view of a float32 / float16 / ml_dtypes.bfloat16 numpy array (no copy when
    it is contiguous)."""
    if not _SIGNED:
        _SIGNED.update({torch.float32: torch.int32, torch.float16: torch.int16,
                        torch.bfloat16: torch.int16, torch.float64: torch.int64})
    array = np.ascontiguousarray(array)
    if array.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16)
    return torch.from_numpy(array)


class TorchBackend:
    """H-Scale NVFP4 quantization in torch, on one device ("cpu" or "cuda:0")."""

    capabilities = CAPABILITIES

    def __init__(self, device: str = "cpu", chunk_groups: int | None = None,
                 compile: bool | None = None):
        self.device_kind = "cuda" if device.startswith("cuda") else "cpu"
        self.device_name = device
        # None: the fused objective for large layers on the CPU (see COMPILE_MIN_GROUPS);
        # False: never; True: for any layer size.
        self.compile = compile
        self.name = "torch-cuda" if self.device_kind == "cuda" else "torch"
        self.chunk_groups = chunk_groups or (CUDA_CHUNK_GROUPS if self.device_kind == "cuda"
                                             else CPU_CHUNK_GROUPS)

    @property
    def version(self) -> str:
        torch = _import_torch()
        lib = f"torch {torch.__version__}" if torch is not None else "torch not installed"
        extra = f"; {fused_status()}" if self.device_kind == "cpu" and torch is not None else ""
        return f"hscale.backends.torch_backend {__version__}, {lib}{extra}"

    def available(self):
        torch = _import_torch()
        if torch is None:
            return False, "torch is not installed"
        if self.device_kind == "cuda" and not torch.cuda.is_available():
            return False, ("torch-cuda backend needs a CUDA device: "
                           "torch.cuda.is_available() is False")
        return True, ""

    def __repr__(self):
        return f"<{self.name} backend on {self.device_name}>"

    # -- the protocol entry point ------------------------------------------------------------
    def quantize(self, weight, hessian_diag=None, *, method="hscale", init="maxabs", K=16, U=6,
                 scale_ceiling=448.0, global_scale=None):
        ok, why = self.available()
        if not ok:
            raise RuntimeError(f"backend {self.name!r} is not available: {why}")
        request = common.validate(weight, hessian_diag, method, init, K, U, scale_ceiling,
                                  global_scale)
        return _Quantizer(self, request).run()


class _Quantizer:
    """One call: the layer, its device tensors, the plan of blocks and the shared outputs."""

    def __init__(self, backend: TorchBackend, request: common.Request):
        import torch
        self.torch = torch
        self.request = request
        self.device = torch.device(backend.device_name)
        self.chunk_groups = max(1, int(backend.chunk_groups))
        rows, cols = request.weight.shape
        self.rows, self.cols, self.ngroups = rows, cols, cols // GROUP
        # The weight in its own dtype (float32, float16 or bfloat16; no copy on the CPU),
        # widened to float64 (exactly) one block at a time.
        self.weight = _as_tensor(torch, request.weight).to(self.device)
        self.scale_values = torch.from_numpy(SCALE_BYTE_VALUES).to(self.device)
        self.scales = None  # s_g * value of each byte, once s_g is known
        self.search = request.method != "rtn" and request.K > 1
        self.workers = {}  # thread id -> _Worker (its reusable buffers)
        self.use_compile = self.device.type == "cpu" and _want_compile(
            backend.compile, rows * self.ngroups)
        if self.use_compile:
            self.chunk_groups = COMPILE_BLOCK_GROUPS

    # -- plan --------------------------------------------------------------------------------
    def blocks(self):
        """(r0, r1, i0, i1): whole rows while a row has at most ``chunk_groups`` groups, else
        column blocks of one row. Each block's groups are contiguous in the weight."""
        ng, target = self.ngroups, self.chunk_groups
        if ng <= target:
            step = max(1, target // ng)
            return [(r0, min(self.rows, r0 + step), 0, ng) for r0 in range(0, self.rows, step)]
        return [(r, r + 1, i0, min(ng, i0 + target))
                for r in range(self.rows) for i0 in range(0, ng, target)]

    # -- run ---------------------------------------------------------------------------------
    def run(self):
        torch, req = self.torch, self.request
        rows, ng = self.rows, self.ngroups
        G_all = rows * ng
        blocks = self.blocks()
        # The fused functions see one shape per layer: every block padded to the same size.
        self.block_groups = COMPILE_BLOCK_GROUPS if self.use_compile else None

        # Pass 1: the group maxima, block by block.
        self.group_amax = torch.empty(G_all, dtype=torch.float64, device=self.device)
        self.for_each(blocks, lambda worker, block: worker.group_maxima(block))
        amax_host = self.group_amax.cpu().numpy()
        self.amax_host = amax_host
        # s_g by the reference (the largest group maximum is the tensor's amax).
        self.global_scale = common.global_scale_for(req, amax_host.max())
        # s_g * value of bytes 0x00..0x7E: the effective scales, exact in float64 (24 x 4 bits).
        self.scales = self.scale_values * float(self.global_scale)
        # Row c: the window around initial byte c, clip(c + delta, 1, 126) for the shifts in
        # priority order 0, +1, -1, ... (HSCALE-WIN-1, HSCALE-ARGMIN-1; by the reference), and
        # the effective scales of those bytes.
        self.window_bytes = self.to_device(common.window_table(req.K, req.U), np.int64)
        self.window_scales = self.scales[self.window_bytes].contiguous()  # (127, K)
        self.h_rows = None
        if req.method == "hscale":
            h_t = torch.from_numpy(req.h).to(self.device).view(ng, GROUP).t()  # (16, ng)
            reps = max(1, self.chunk_groups // ng)
            self.h_rows = h_t.repeat(1, reps).contiguous()  # (16, reps*ng): a block's pattern

        # Pass 2: initial bytes, search and encoding, block by block.
        self.codes = torch.empty(G_all, GROUP, dtype=torch.uint8, device=self.device)
        self.chosen = torch.empty(G_all, dtype=torch.uint8, device=self.device)
        self.initial = torch.empty(G_all, dtype=torch.uint8, device=self.device)
        if self.use_compile:
            with _Compiled.config():  # inductor settings, once (entering costs ~1 ms)
                self.for_each(blocks, lambda worker, block: worker.process(block))
        else:
            self.for_each(blocks, lambda worker, block: worker.process(block))

        # NVFP4-ZERO-1: a zero group has byte 0x00 (it was searched at 0x01).
        zero = torch.from_numpy(amax_host == 0).to(self.device)
        self.chosen.masked_fill_(zero, 0)
        self.initial.masked_fill_(zero, 0)
        return common.finish(req, self.codes.view(rows, self.cols).cpu().numpy(),
                             self.chosen.view(rows, ng).cpu().numpy(),
                             self.initial.view(rows, ng).cpu().numpy(), self.global_scale)

    def for_each(self, blocks, job):
        """``job(worker, block)`` for every block: on worker threads on the CPU (see
        ``run_threaded``), else in this thread."""
        workers = self.torch.get_num_threads() if self.device.type == "cpu" else 1
        main = self.workers.setdefault(None, _Worker(self, main=True))
        if workers > 1 and len(blocks) > 1:
            if self.use_compile:
                # The first block here: it compiles and checks the fused functions for the
                # block shape, which the worker threads then only call.
                job(main, blocks[0])
                blocks = blocks[1:]
            self.run_threaded(blocks, job, workers)
        else:
            for block in blocks:
                job(main, block)

    def run_threaded(self, blocks, job, workers):
        """Blocks handed out to ``workers`` threads, each running single-threaded torch ops.

        A block is ~40 small elementwise ops; splitting every op across cores (torch's intra-op
        OpenMP) pays a fork/join per op and stalls on the slowest core, badly so when another
        process holds a core. Whole blocks per thread from a shared queue have neither cost.
        torch (and NumPy) release the GIL inside their kernels. The process-wide intra-op
        thread count is restored afterwards.
        """
        import threading
        from concurrent.futures import ThreadPoolExecutor
        torch = self.torch
        saved = torch.get_num_threads()

        def init():
            torch.set_num_threads(1)

        def task(block):
            ident = threading.get_ident()
            worker = self.workers.get(ident)
            if worker is None:
                worker = self.workers[ident] = _Worker(self)
            job(worker, block)

        try:
            with ThreadPoolExecutor(max_workers=workers, initializer=init) as pool:
                for future in [pool.submit(task, b) for b in blocks]:
                    future.result()
        finally:
            torch.set_num_threads(saved)

    def to_device(self, array, dtype):
        return self.torch.from_numpy(np.ascontiguousarray(array, dtype=dtype)).to(self.device)


class _Worker:
    """The hot loops for one thread, with its own reusable float64 work buffers."""

    def __init__(self, q: _Quantizer, main: bool = False):
        self.q = q
        self.torch = q.torch
        self.main = main  # the calling thread's worker: may compile fused functions
        self.buffers = {}
        self.aw_key = None  # which block's |w|^T the "aw" buffer holds

    def buffer(self, name, numel, dtype=None):
        """A work buffer of at least ``numel`` elements, grown as needed, reused across blocks."""
        torch = self.torch
        dtype = dtype or torch.float64
        b = self.buffers.get(name)
        if b is None or b.numel() < numel:
            b = self.buffers[name] = torch.empty(numel, dtype=dtype, device=self.q.device)
        return b[:numel]

    def block_weights(self, block):
        r0, r1, i0, i1 = block
        q = self.q
        w = q.weight[r0:r1, GROUP * i0:GROUP * i1].reshape(-1, GROUP)  # (G, 16), own dtype
        g0 = r0 * q.ngroups + i0
        return w, slice(g0, g0 + w.shape[0])

    def group_maxima(self, block):
        """Pass 1: max |w| of each group of the block, exact, into ``group_amax``."""
        w, sl = self.block_weights(block)
        low, high = self.torch.aminmax(w, dim=1)
        # max(max w, -min w) = max |w| (a group of zeros may give -0.0, equal to 0 below).
        self.q.group_amax[sl] = self.torch.maximum(high, low.neg_())  # widened exactly

    def initial_bytes(self, sl, top):
        """The range-fitting bytes at ``top`` (6 or 4) of the block's groups, by the reference
        (NVFP4-INIT-1); a zero group gets 0x01 here (searched there, 0x00 put back at the end)."""
        q = self.q
        amax = q.amax_host[sl]
        c = range_fitting_byte(amax, q.global_scale, top).astype(np.int64)
        c[amax == 0] = LADDER_FIRST_BYTE
        return self.torch.from_numpy(c).to(q.device)

    def process(self, block):
        """Pass 2: initial bytes, the search and the encoding of the block's groups."""
        torch, q = self.torch, self.q
        r0, r1, i0, i1 = block
        w, sl = self.block_weights(block)
        G = w.shape[0]
        self.aw_key = None
        c0 = self.initial_bytes(sl, 6.0)
        if q.request.init == "4over6":
            # NVFP4-INIT-2: unweighted error of the byte at 6 and the byte at 4; a tie keeps 6.
            c6, c4 = c0, self.initial_bytes(sl, 4.0)
            scale = torch.stack((torch.take(q.scales, c6), torch.take(q.scales, c4)), dim=1)
            err = self.objectives(w, scale, None)  # (G, 2)
            c0 = torch.where(err[:, 1] < err[:, 0], c4, c6)
        q.initial[sl] = c0
        if q.search:
            if q.h_rows is None:
                h_blk = None  # scale-only: h = 1, and 1 * (d*d) is d*d
            elif i1 - i0 == q.ngroups:
                h_blk = q.h_rows[:, :G]  # whole rows: the pattern repeats every ng groups
            else:
                h_blk = q.h_rows[:, i0:i1]
            # The K candidates of each group in priority order 0, +1, -1, ... (HSCALE-WIN-1).
            err = self.objectives(w, q.window_scales.index_select(0, c0), h_blk)  # (G, K)
            # torch.min returns the first minimal index along the contiguous last axis, so an
            # exact tie keeps the earlier candidate in priority order (HSCALE-ARGMIN-1).
            rank = torch.min(err, dim=1).indices
            byte = torch.take(q.window_bytes, c0 * q.request.K + rank)
        else:
            byte = c0
        q.chosen[sl] = byte
        self.encode(w, byte, out=q.codes[sl])

    def objectives(self, w, scale, h_blk):
        """E (G, k) of the groups ``w`` (G, 16, own dtype) at ``scale`` (G, k): the fused
        objective where enabled (blocks padded to one shape), else the eager one."""
        q = self.q
        if not q.use_compile:
            return self.eager_objectives(self.abs_t(w), scale, h_blk)
        torch = self.torch
        G, k = scale.shape
        full = q.block_groups
        if G < full:  # the last block: pad with zero groups at a valid scale
            pad = full - G
            w = torch.cat((w, w.new_zeros(pad, GROUP)))
            scale = torch.cat((scale, scale[:1].expand(pad, k)), dim=0)
            if h_blk is not None:
                h_blk = torch.cat((h_blk, h_blk.new_zeros(GROUP, pad)), dim=1)
        args = (w.contiguous(), scale.contiguous(),
                None if h_blk is None else h_blk.contiguous())
        return _COMPILED_OBJECTIVE(torch, args, self.eager_objectives_of, self.main)[:G]

    def abs_t(self, w):
        """|w| as float64 (exact), transposed to (16, G), in a reused buffer; kept for the
        block (the 4over6 choice and the search both need it)."""
        key = (w.data_ptr(), tuple(w.shape), w.dtype)
        if self.aw_key != key:
            G = w.shape[0]
            aw_t = self.buffer("aw", GROUP * G).view(GROUP, G)
            aw_t.copy_(w.t()).abs_()
            self.aw_key = key
        return self.buffers["aw"][:GROUP * w.shape[0]].view(GROUP, w.shape[0])

    def eager_objectives_of(self, w, scale, h_blk):
        self.aw_key = None  # a probe or a padded block: not the cached one
        return self.eager_objectives(self.abs_t(w), scale, h_blk)

    def eager_objectives(self, aw_t, scale, h_blk):
        """E (G, k) for the groups ``aw_t`` = |w|^T (16, G) at the effective scales ``scale``
        (G, k).

        Work layout (16, G, k): the element index outermost, so that the pairwise sum adds
        whole contiguous (G, k) planes and E comes out (G, k) contiguous for the argmin.
        """
        torch = self.torch
        G, k = scale.shape
        n = GROUP * G * k
        aw_b = aw_t.unsqueeze(2)  # (16, G, 1)
        scale_b = scale.unsqueeze(0)  # (1, G, k)
        x = self.buffer("x", n).view(GROUP, G, k)
        t = self.buffer("t", n).view(GROUP, G, k)

        torch.div(aw_b, scale_b, out=x)  # x = |w|/s, decisions exact (module docstring)
        x.clamp_max_(6.0)  # saturation: without it x >= 7 would round past 6
        torch.clamp_min(x, 1.0, out=t)  # T = clamp(x, 1, 6)
        x.add_(t, alpha=MAGIC)  # fl(x + 2^51 T): rounds x to the E2M1 spacing, ties to even
        x.sub_(t, alpha=MAGIC)  # exact: x is now q, the E2M1 magnitude
        torch.addcmul(aw_b, x, scale_b, value=-1.0, out=x)  # d = |w| - q*s, q*s exact
        x.mul_(x)  # d*d
        if h_blk is not None:
            x.mul_(h_blk.unsqueeze(2))  # h*(d*d)
        # Balanced pairwise sum over the element axis, adjacent pairs level by level:
        # x[2j] += x[2j+1]; x[4j] += x[4j+2]; x[8j] += x[8j+4]; E = x[0] + x[8].
        x[0::2].add_(x[1::2])
        x[0::4].add_(x[2::4])
        x[0::8].add_(x[4::8])
        return torch.add(x[0], x[8], out=t[0])

    def encode(self, w, byte, out):
        """E2M1 codes (G, 16) uint8 of the groups ``w`` (G, 16) at their chosen bytes, into
        ``out``; fused where enabled (padded to the block shape), else eager."""
        torch, q = self.torch, self.q
        scale = torch.take(q.scales, byte)
        if not q.use_compile:
            return out.copy_(self.eager_encode(w, scale))
        G, full = w.shape[0], q.block_groups
        if G < full:
            pad = full - G
            w = torch.cat((w, w.new_zeros(pad, GROUP)))
            scale = torch.cat((scale, scale.new_ones(pad)))
        codes = _COMPILED_ENCODE(torch, (w.contiguous(), scale), self.eager_encode, self.main)
        return out.copy_(codes[:G])

    def eager_encode(self, w, scale):
        """E2M1 codes (G, 16) uint8 of the groups ``w`` (G, 16, own dtype) at ``scale`` (G,)."""
        torch = self.torch
        G = w.shape[0]
        x = self.buffer("ex", GROUP * G).view(G, GROUP)
        t = self.buffer("et", GROUP * G).view(G, GROUP)
        x.copy_(w).abs_()  # |w|, widened exactly
        x.div_(scale.unsqueeze(1))
        x.clamp_max_(6.0)
        torch.clamp_min(x, 1.0, out=t)
        x.add_(t, alpha=MAGIC)
        x.sub_(t, alpha=MAGIC)  # q in {0, .5, 1, 1.5, 2, 3, 4, 6}, exactly as in the search
        # magnitude code = min(q, 2) + min(q, 5): 2q on 0..2, q + 2 at 3 and 4, 7 at 6.
        torch.clamp_max(x, 2.0, out=t)
        x.clamp_max_(5.0).add_(t)
        codes = self.buffer("codes", GROUP * G, torch.uint8).view(G, GROUP)
        codes.copy_(x)  # exact small integers 0..7
        # NVFP4-E2M1-3: bit 3 is the sign bit of w (-0.0 too): the integer view is negative.
        negative = torch.lt(w.view(_SIGNED[w.dtype]), 0).view(torch.uint8)
        return codes.bitwise_or_(negative.mul_(8))


def create_cpu():
    return TorchBackend("cpu")


def create_cuda():
    return TorchBackend("cuda:0")
