"""A recipe's sizes that follow ``data.image_size``: the folder experiments
(configs/experiment/*_folder.yaml) set their ViT patch and their small views by these rules,
so that one recipe serves 64 px and 224 px photos. OmegaConf resolvers, because the encoder
and the views are built from the resolved numbers.

| rule | resolver | what it gives | at 224 px | at 96 px | at 32 px |
|---|---|---|---|---|---|
| a ViT's patch | ``${patch:<size>}`` | the divisor of the size nearest size / 12, at least 2 and at most size / 4 (a grid of about 12 x 12) | 16 | 8 | 2 |
| a view's side | ``${scaled:<size>,<fraction>,<multiple>}`` | size x fraction, rounded to a multiple of ``multiple`` (a patch), at least one | 0.43, 16: 96 | 0.43, 8: 40 | 0.43, 2: 14 |

12 tokens a side is DINO's 96 px view at patch 8 and close to ViT/16 at 224 px (14);
0.43 is DINO's local-to-global ratio (96 / 224).
"""

from omegaconf import OmegaConf

from trainlab.utils.errors import ConfigError

#: Tokens a side the patch rule aims at.
GRID = 12


def patch(size: int) -> int:
    """The divisor of ``size`` nearest size / GRID (the larger on a tie), from 2 to size / 4."""
    divisors = [d for d in range(2, size // 4 + 1) if size % d == 0]
    if not divisors:
        raise ConfigError(
            f"data.image_size={size} has no ViT patch from 2 to a quarter of it: give a "
            "multiple of 8, or model.encoder.patch_size"
        )
    return min(divisors, key=lambda d: (abs(d - size / GRID), -d))


def scaled(size: int, fraction: float, multiple: int = 1) -> int:
    """``size`` x ``fraction`` rounded to a multiple of ``multiple``, at least one multiple."""
    return max(multiple, round(size * fraction / multiple) * multiple)


def register() -> None:
    for name, rule in (("patch", patch), ("scaled", scaled)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, rule)
