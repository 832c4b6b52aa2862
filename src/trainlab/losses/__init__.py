"""Each method's loss as an ``nn.Module``, one per file: plain torch, no Lightning, so each is
tested alone (tests/test_losses.py) and a fork reuses it in its own method. The methods in
model/ call them; batch statistics over ranks are the caller's (``networks/gather.py``).

Written here rather than taken from lightly: lightly is not a dependency of the template, and
each loss is a few lines."""
