"""Plugins of Lightning's Trainer, as configs/trainer plugs them in."""
