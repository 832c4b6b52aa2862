"""The networks, plain nn.Modules and their helpers: no Lightning, nothing of the package above."""
