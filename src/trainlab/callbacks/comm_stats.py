"""Logs what a DDP communication hook saved: ``comm/compression_rate`` and bytes per step."""

from lightning.pytorch.callbacks import Callback


class CommStatsLogger(Callback):
    """Reads the byte counts that ``trainlab.strategy.comm_hooks.CommHookDDPStrategy`` keeps
    for its hook; that strategy adds it to the Trainer."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        stats = getattr(trainer.strategy, "comm_stats", None)
        if stats is None or not stats.calls:
            return
        dense, sent = stats.take()
        if not dense:  # a step without backward communication (e.g. the first no_sync)
            return
        values = {
            "comm/compression_rate": dense / sent,
            "comm/bytes_sent_per_step": float(sent),
            "comm/bytes_allreduce_per_step": float(dense),
        }
        state = getattr(trainer.strategy, "comm_state", None)
        if state is not None and hasattr(state, "iter"):
            values["comm/powersgd_iter"] = float(state.iter)
        pl_module.log_dict(values, on_step=True, on_epoch=False)
