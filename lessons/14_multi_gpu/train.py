"""Data-parallel training of lesson 10's model, as a script that torchrun launches (the usual way to start ranks):

    torchrun --standalone --nproc-per-node=2 train.py --route ddp --kernels custom --steps 20

torchrun starts one process per rank and gives each its place in the environment (RANK, WORLD_SIZE, LOCAL_RANK,
and where the ranks meet: MASTER_ADDR, MASTER_PORT); init_process_group reads them. With as many GPUs as ranks the
ranks use NCCL, one GPU each; otherwise gloo, with the course's kernels on the simulator. Every rank runs the same
steps on its own rows of each global batch (kernels/lessons/lesson14_data_parallel.py, train_rank), and rank 0
prints the curve: the one a single process gets from the whole batch (`--alone` prints that one too).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: `kernels` is its toolkit

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from kernels.lessons import lesson14_data_parallel as dp  # noqa: E402
from kernels.ranks import NO_MULTICAST  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Data-parallel training of lesson 10's model, one rank per process "
                                            "(start it with torchrun --nproc-per-node=N train.py ...)")
    p.add_argument("--route", choices=dp.ROUTES, default="ddp")
    p.add_argument("--kernels", choices=("eager", "custom"), default="custom")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch", type=int, default=8, help="the global batch: sequences per step over all ranks")
    p.add_argument("--alone", action="store_true", help="rank 0 also prints one process's curve on the whole batch")
    a = p.parse_args(argv)
    if "RANK" not in os.environ:
        p.error("run it with torchrun (torchrun --standalone --nproc-per-node=2 train.py ...): it sets RANK, "
                "WORLD_SIZE and where the ranks meet")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    on_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= world
    if on_gpus:
        for name, value in NO_MULTICAST.items():
            os.environ.setdefault(name, value)
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl" if on_gpus else "gloo")
    try:
        losses = dp.train_rank(rank, world, a.route, a.kernels, dp.SMALL, a.batch, a.steps)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        print(f"{a.route}, {a.kernels} kernels, {world} ranks:", " ".join(f"{v:.4f}" for v in losses))
        if a.alone:
            alone = dp.train_alone(a.kernels, dp.SMALL, a.batch, a.steps, "cuda" if on_gpus else "cpu")
            print(f"one process, the whole batch:", " ".join(f"{v:.4f}" for v in alone))
    return 0


if __name__ == "__main__":
    sys.exit(main())
