"""``hscale quantize`` on several processes (torch.distributed), one machine or many.

Launched by ``torchrun --nproc-per-node N -m hscale quantize ...`` (or by Slurm's ``srun`` with
torchrun's environment: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), every
process runs the same command; ``Ranks.from_environment`` joins the process group (gloo on the
CPU, NCCL when the calibration runs on CUDA, each process on its own device ``cuda:LOCAL_RANK``;
the CUDA path is not exercised by the tests, which run on the CPU). Then, block by block:

* the calibration batches are split: batch ``b`` runs on process ``b % N`` (whole batches as
  one process forms them, so that every token's activations are the same bits);
* the statistics are summed: each batch's h is gathered and the block's h summed in batch order
  on every process (bit for bit one process's h), H summed per process and then across
  processes (``all_reduce``: equal to one process's up to the order of float64 additions);
* the block's weights are shared out (the largest first, each to the least loaded process), each
  process quantizes its share and sends the results to process 0, which writes the one
  checkpoint in the planned order.

One process (no ``WORLD_SIZE``, or 1) is the same code with every collective a no-op.
"""

from __future__ import annotations

import os


class Ranks:
    """This process's place among the processes of a run, and the few collectives the run
    needs (no-ops on one process)."""

    def __init__(self, rank: int = 0, world: int = 1, backend: str | None = None):
        self.rank, self.world, self.backend = rank, world, backend

    @classmethod
    def from_environment(cls, device: str | None = None) -> "Ranks":
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        if world <= 1:
            return cls()
        import torch.distributed as dist
        backend = "nccl" if device and str(device).startswith("cuda") else "gloo"
        if backend == "nccl" and "LOCAL_RANK" in os.environ:
            import torch
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))  # one device per process
        if not dist.is_initialized():
            dist.init_process_group(backend=backend)
        return cls(dist.get_rank(), dist.get_world_size(), backend)

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def mine(self, index: int) -> bool:
        """Whether batch (or item) ``index`` is this process's."""
        return index % self.world == self.rank

    def gather(self, value) -> list:
        """Every process's ``value``, in rank order, on every process."""
        if not self.distributed:
            return [value]
        import torch.distributed as dist
        out = [None] * self.world
        dist.all_gather_object(out, value)
        return out

    def gather_to_main(self, value) -> list | None:
        """Every process's ``value`` on process 0 (None elsewhere)."""
        if not self.distributed:
            return [value]
        import torch.distributed as dist
        out = [None] * self.world if self.main else None
        dist.gather_object(value, out, dst=0)
        return out

    def all_reduce(self, tensor) -> None:
        if self.distributed:
            import torch.distributed as dist
            dist.all_reduce(tensor)

    def broadcast(self, value):
        """Process 0's ``value`` on every process."""
        if not self.distributed:
            return value
        import torch.distributed as dist
        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist
            dist.barrier()

    def share_out(self, sizes: list[int]) -> list[int]:
        """The process of each item: the largest first, each to the least loaded process (ties
        to the lowest rank); the same on every process."""
        load = [0] * self.world
        owner = [0] * len(sizes)
        for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
            rank = min(range(self.world), key=lambda r: (load[r], r))
            owner[index] = rank
            load[rank] += sizes[index]
        return owner

    def close(self) -> None:
        if self.distributed:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()
