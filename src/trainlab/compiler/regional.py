"""``compile=true``: torch.compile a LightningModule's networks in place, one repeated layer
at a time (regional compilation).

A transformer is its block 12 to 40 times over: compiled once, the block's graph serves
every layer (torch's regional compilation recipe, made for compile time: with whole
networks compiled, an H200 took about 105 s to the first steady step of ViT-H/14). The token
count is marked dynamic where it varies (networks/vit.py's run_blocks): one graph then
serves every count of I-JEPA's masks.
"""

import lightning as L
import torch
from torch import nn

from trainlab.utils import torch_internals

# The inductor flags each torch in range needs, with the torch issue each one answers: (flag,
# value, the first release that no longer needs it or None while none is known, issue).
INDUCTOR_WORKAROUNDS = [
    # Symbolic token counts reach the coalesce-tiling analysis, which asserts in
    # tiling_utils.get_pw_red_splits (it stopped compile=true on an H200 with torch 2.11).
    ("triton.coalesce_tiling_analysis", False, (2, 12), "pytorch/pytorch#181793"),
    # Mix-order reduction (LayerNorm's backward) gave silently wrong gradients from 2.10.0 on;
    # no release is known to have fixed it for every shape, so it stays off in the range.
    ("triton.mix_order_reduction", False, None, "pytorch/pytorch#193061"),
]


def torch_release(version: str = torch.__version__) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def apply_inductor_workarounds(release: tuple[int, int] | None = None) -> dict[str, object]:
    """Set the workarounds the running torch needs; returns what was set, by flag."""
    release = release or torch_release()
    config, applied = torch_internals.inductor_config(), {}
    # inductor's 512-bit C++ kernels (CPU only: CUDA's do not read the flag) gave a NaN loss
    # from I-JEPA's first bf16 step on an Intel Xeon with avx512_fp16, under torch 2.11.0 and
    # 2.14.1; 256-bit kernels matched eager there. No torch issue is known, so on every release.
    if torch.backends.cpu.get_cpu_capability().startswith("AVX512"):
        config.cpp.simdlen = applied["cpp.simdlen"] = 256
    for flag, value, fixed_in, _issue in INDUCTOR_WORKAROUNDS:
        if fixed_in is None or release < fixed_in:
            section, name = flag.split(".")
            setattr(getattr(config, section), name, value)
            applied[flag] = value
    return applied


def repeated_layers(network: nn.Module) -> list[nn.Module]:
    """The layers of each stack in ``network`` (a ModuleList or Sequential of modules of one
    class: a ViT's blocks, a ResNet stage's blocks): what regional compilation compiles.
    timm names its stacks differently per family (``blocks``, ``layer1``,
    ``stages.0.blocks``), so they are found by shape, not name."""
    layers, stacks = [], [network]
    while stacks:
        module = stacks.pop()
        children = list(module.children())
        kinds = {type(child) for child in children}
        if isinstance(module, nn.ModuleList | nn.Sequential) and len(kinds) == 1:
            layers.extend(children)
        else:
            stacks.extend(reversed(children))
    return layers


def compile_networks(model: L.LightningModule, backend="inductor") -> None:
    """Each network's repeated layers, in place (``module.compile()``: state_dict keys stay
    the plain ones); a network without a stack of layers is compiled whole. Compiling the
    LightningModule itself would trace into Lightning's logging; metrics and batch transforms
    need no compiling."""
    # A block's graph is kept per case: training or not, gradients or not (the target
    # encoder), static or dynamic token count. torch's limit of 8 per function would send a
    # method with several networks of one block class back to eager.
    torch_internals.ensure_recompile_limit(32)
    apply_inductor_workarounds()
    for network in model.children():
        if not any(True for _ in network.parameters()):
            continue
        for layer in repeated_layers(network) or [network]:
            layer.compile(backend=backend)
