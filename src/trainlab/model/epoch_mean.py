"""An epoch's mean training loss over every rank and every step of the epoch, a resumed one
included. Lightning's ``on_epoch`` mean starts again at a resume, so a run stopped mid-epoch
logged the mean of its resumed steps only; this one is kept in the checkpoint. Each step's
loss is summed over ranks when it is added (one scalar all-reduce: no barrier, no host sync),
so every rank holds the same sum and rank 0's checkpoint holds the run's."""

import torch
import torch.distributed as dist


class EpochMean:
    def __init__(self) -> None:
        self.reset(-1)

    def reset(self, epoch: int) -> None:
        self.epoch, self.total, self.count = epoch, 0.0, 0

    def start(self, epoch: int) -> None:
        """At an epoch's start: a new epoch starts from zero, a resumed one goes on."""
        if epoch != self.epoch:
            self.reset(epoch)

    def add(self, loss: torch.Tensor) -> None:
        dtype = torch.float32 if loss.device.type == "mps" else torch.float64
        value = loss.detach().to(dtype)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            value = value.clone()
            dist.all_reduce(value)  # SUM: gloo has no AVG
            value = value / dist.get_world_size()
        self.total = self.total + value
        self.count += 1

    def mean(self) -> torch.Tensor:
        return torch.as_tensor(self.total) / max(self.count, 1)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "total": float(self.total), "count": self.count}

    def load_state_dict(self, state: dict | None) -> None:
        if state:  # the total in float64, as add() keeps it: a mean of no further steps too
            total = torch.tensor(state["total"], dtype=torch.float64)
            self.epoch, self.total, self.count = state["epoch"], total, state["count"]
