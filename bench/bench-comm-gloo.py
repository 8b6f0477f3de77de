#!/usr/bin/env python3
# bench-comm-gloo.py — torch.distributed's gloo backend: all_reduce of
# float32 tensors between ranks of this host, timed like bench-comm (a
# barrier, one collective, the median of the runs), bus bandwidth as
# nccl-tests defines it. Run by bench/run-bench-comm.sh.
#
#   bench-comm-gloo.py [--ranks 2] [--min-size 4096] [--max-size 268435456]
#                      [--iterations 20]
#
# Prints "gloo_all_reduce <bytes> <us> <algbw> <busbw>" per size,
# tab-separated, from rank 0.
import argparse
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def runs_for(size, iterations):
    scale = (1 << 20) / size
    return max(5, int(iterations * (min(scale, 16) if scale > 1 else scale)))


def rank_main(rank, args, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    world = dist.get_world_size()
    size = args.min_size
    while size <= args.max_size:
        t = torch.arange(size // 4, dtype=torch.float32) * 1e-3
        for _ in range(3):
            dist.all_reduce(t)
        times = []
        for _ in range(runs_for(size, args.iterations)):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - start)
        median = torch.tensor([statistics.median(times)], dtype=torch.float64)
        dist.broadcast(median, 0)
        seconds = median.item()
        if rank == 0:
            algbw = size / seconds / 1e9
            print("gloo_all_reduce\t%d\t%.2f\t%.3f\t%.3f" %
                  (size, seconds * 1e6, algbw, algbw * 2 * (world - 1) / world), flush=True)
        size *= 2
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--min-size", type=int, default=4096)
    parser.add_argument("--max-size", type=int, default=256 << 20)
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(args, port), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
