"""The I-JEPA predictor: a narrow ViT that predicts target-block features from context tokens."""

import torch
from timm.layers import trunc_normal_
from timm.models.vision_transformer import Block
from torch import nn

from trainlab.model.networks.vit import gather_tokens, run_blocks, sincos_pos_embed


class Predictor(nn.Module):
    """Context tokens + mask tokens at the target positions -> predicted target features.

    Each of the M target blocks is predicted in its own sequence (the context repeated M
    times), so blocks do not see each other, as in the paper.
    """

    def __init__(
        self,
        grid: tuple[int, int],
        embed_dim: int,
        pred_dim: int = 384,
        depth: int = 6,
        num_heads: int = 12,
        mlp_ratio: float = 4.0,
        drop_path_rate: float = 0.0,
        grad_checkpointing: bool = False,
    ):
        super().__init__()
        self.embed = nn.Linear(embed_dim, pred_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, pred_dim))
        # Frozen parameter, not a buffer: official checkpoints carry it (predictor_pos_embed).
        self.pos_embed = nn.Parameter(sincos_pos_embed(tuple(grid), pred_dim), requires_grad=False)
        rates = [drop_path_rate * i / max(1, depth - 1) for i in range(depth)]  # stochastic depth
        self.blocks = nn.ModuleList(
            Block(pred_dim, num_heads, mlp_ratio, qkv_bias=True, drop_path=r) for r in rates
        )
        self.norm = nn.LayerNorm(pred_dim, eps=1e-6)
        self.proj = nn.Linear(pred_dim, embed_dim)
        self.grad_checkpointing = grad_checkpointing
        trunc_normal_(self.mask_token, std=0.02)
        self.apply(self._init)
        for i, block in enumerate(self.blocks):  # residual-branch rescale, as in the encoder
            block.attn.proj.weight.data.div_((2.0 * (i + 1)) ** 0.5)
            block.mlp.fc2.weight.data.div_((2.0 * (i + 1)) ** 0.5)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(
        self, context: torch.Tensor, context_idx: torch.Tensor, target_idx: torch.Tensor
    ) -> torch.Tensor:
        """context (B, K, D) at context_idx (B, K); target_idx (B, M, T) -> (B, M, T, D)."""
        B, M, T = target_idx.shape
        pos = self.pos_embed.expand(B, -1, -1)
        ctx = self.embed(context) + gather_tokens(pos, context_idx)  # (B, K, P)
        queries = self.mask_token + gather_tokens(pos, target_idx)  # (B, M, T, P)
        K, P = ctx.shape[1], ctx.shape[2]
        x = torch.cat([ctx.unsqueeze(1).expand(B, M, K, P), queries], dim=2).reshape(
            B * M, K + T, P
        )
        x = run_blocks(self.blocks, x, self.grad_checkpointing and self.training)
        x = self.proj(self.norm(x[:, K:]))
        return x.reshape(B, M, T, -1)
