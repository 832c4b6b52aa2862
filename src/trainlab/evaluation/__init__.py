"""Rating frozen features the way papers do: a grid of linear probes chosen on validation,
DINO's kNN, and the baselines that give the numbers meaning (raw pixels, a random encoder).

No Lightning here: features are computed once and everything trains on cached tensors.
"""
