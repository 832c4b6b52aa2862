"""LightningModules, what configs/model chooses; the networks they train are in networks/."""
