"""``${cpu_precision:${trainer.accelerator}}``: bf16-mixed on a CPU with bf16 instructions
(and on a GPU chosen by name, below), else 32-true, for an experiment with a CPU time budget
(ijepa_mnist: 10 minutes on 2 cores).

On the 2-core AMD EPYC here (AVX-512 bf16), ijepa_mnist's 60 epochs fit in 7.6 to 8.3
minutes in bf16 against 11.4 in float32 (research/ijepa_recipe_search.md). On a
CPU without bf16 instructions bf16 runs far slower than float32, so float32 stays there.
A GPU chosen by name (``trainer=gpu``, ``trainer.accelerator=gpu``) gets bf16-mixed, what
configs/trainer/gpu.yaml sets, which the experiment's value would otherwise override;
``accelerator=auto`` on a machine with a GPU keeps the trainer default, 32-true (asking
the GPU whether it runs bf16 would initialise CUDA while the config is composed).
An OmegaConf resolver, so the composed config shows the value chosen (``--cfg job --resolve``);
``trainer.precision=...`` on the command line still wins.
"""

from omegaconf import OmegaConf

from trainlab.utils.machine import cpu_flags

BF16_FLAGS = {"avx512_bf16", "amx_bf16"}  # /proc/cpuinfo's names of the bf16 instructions


def cpu_precision(accelerator: str = "auto") -> str:
    import torch  # here, not at the top: importing trainlab (train.py --help) stays torch-free

    if accelerator in ("gpu", "cuda"):
        return "bf16-mixed"
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    return "bf16-mixed" if on_cpu and cpu_flags() & BF16_FLAGS else "32-true"


def register() -> None:
    if not OmegaConf.has_resolver("cpu_precision"):
        OmegaConf.register_new_resolver("cpu_precision", cpu_precision)
