"""Comm hooks inside one 2-process gloo job, so start-up is paid once.

``python tests/comm_hooks_harness.py OUT_DIR``: as tests/ddp_harness.py, whose models and
helpers it uses; each rank writes what it saw to OUT_DIR/rank<N>.json;
tests/test_comm_hooks.py asserts on it.
"""

import sys
from pathlib import Path

import torch.distributed as dist
from ddp_harness import Regression, data, trainer, write_report
from torch.utils.data import DataLoader

from trainlab.strategy.comm_hooks import CommHookDDPStrategy


def main(out: Path) -> None:
    report = {}
    # Comm hooks run on gloo and report their savings; the loss still falls. The dtypes the
    # hooks really all-reduce are recorded: the byte counts alone follow from a fixed item size.
    reduced_dtypes = set()
    all_reduce = dist.all_reduce

    def recording_all_reduce(tensor, *args, **kwargs):
        if tensor.is_floating_point():  # not Lightning's integer flags (stop decisions)
            reduced_dtypes.add(str(tensor.dtype))
        return all_reduce(tensor, *args, **kwargs)

    dist.all_reduce = recording_all_reduce  # the hooks call torch.distributed.all_reduce
    powersgd = {"start_powerSGD_iter": 2, "matrix_approximation_rank": 1}
    for label, hook, extra in [
        ("fp16_compress", "fp16_compress", {}),
        ("bf16_compress", "bf16_compress", {}),
        ("powersgd", "powersgd", {"powersgd": powersgd}),
        ("powersgd_fp16", "powersgd", {"powersgd": powersgd, "compress_wrapper": "fp16"}),
    ]:
        # 1.1 MB of weights in 0.25 MB buckets: several buckets, the case that aborted gloo.
        model = Regression(width=64, hidden=512, layers=2, lr=0.01)
        strategy = CommHookDDPStrategy(comm_hook=hook, bucket_cap_mb=0.25, **extra)
        t = trainer(strategy, max_epochs=6)  # the strategy adds its CommStatsLogger
        reduced_dtypes.clear()
        t.fit(model, DataLoader(data(64, width=64), batch_size=8))
        report[label] = {
            "reduced_dtypes": sorted(reduced_dtypes),
            "calls": strategy.comm_stats.calls,
            "compression_rate": float(t.callback_metrics["comm/compression_rate"]),
            "iter": getattr(strategy.comm_state, "iter", None),
            "first_loss": sum(model.losses[:4]) / 4,
            "last_loss": sum(model.losses[-4:]) / 4,
            "steps": t.global_step,
        }

    dist.all_reduce = all_reduce
    report["rank"] = model.global_rank
    write_report(out, report)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
