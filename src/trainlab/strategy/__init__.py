"""Distributed training by config: DDP with comm hooks on every backend, launchers, checks."""
