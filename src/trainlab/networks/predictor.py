"""The I-JEPA predictor: a narrow ViT that predicts target-block features from context tokens."""

import torch
import torch.nn.functional as F
from timm.layers import trunc_normal_
from timm.models.vision_transformer import Block
from torch import nn

from trainlab.networks.vit import gather_tokens, run_blocks, sincos_pos_embed
from trainlab.utils.ranges import Count, DropRate, Positive


class RowsBlock(Block):
    """timm's ViT Block whose ``forward(x, start)`` returns ``block(x)[:, start:]`` without
    computing the rows before ``start``: their queries, attention output, projection and MLP
    would be thrown away, so only keys and values see every row.

    Written by hand because timm's Block runs every row it is given. It follows timm's
    Attention.forward (fused kernel or written out, as ``attn.fused_attn`` says, and its
    optional output gate) and gives the same numbers to float rounding (tests/test_ijepa.py).
    A subclass, not a function, so the call goes through the module: FSDP gathers a block's
    parameters in its forward hooks.
    """

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        if not start:
            return super().forward(x)
        attn = self.attn
        B, N, _ = x.shape
        D, heads, head_dim = attn.attn_dim, attn.num_heads, attn.head_dim
        h = self.norm1(x)
        w_q, w_kv = attn.qkv.weight.split([D, 2 * D])
        b_q, b_kv = (None, None) if attn.qkv.bias is None else attn.qkv.bias.split([D, 2 * D])
        q = F.linear(h[:, start:], w_q, b_q).reshape(B, N - start, heads, head_dim).transpose(1, 2)
        kv = F.linear(h, w_kv, b_kv).reshape(B, N, 2, heads, head_dim).permute(2, 0, 3, 1, 4)
        q, (k, v) = attn.q_norm(q), (attn.k_norm(kv[0]), kv[1])
        if attn.fused_attn:
            dropout = attn.attn_drop.p if attn.training else 0.0
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout)
        else:
            out = attn.attn_drop((q * attn.scale @ k.transpose(-2, -1)).softmax(dim=-1)) @ v
        out = attn.norm(out.transpose(1, 2).reshape(B, N - start, D))
        if attn.gate is not None:  # timm's optional output gate, from the block's own rows
            out = out * attn.gate(h[:, start:]).sigmoid()
        x = x[:, start:] + self.drop_path1(self.ls1(attn.proj_drop(attn.proj(out))))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class Predictor(nn.Module):
    """Context tokens + mask tokens at the target positions -> predicted target features.

    Each of the M target blocks is predicted in its own sequence (the context repeated M
    times), so blocks do not see each other, as in the paper. Only the mask tokens' outputs
    are read, so the last block runs its queries, projection and MLP on those rows alone
    (``RowsBlock``): the same predictions for fewer FLOPs (the step's speed-up:
    benchmarks/ijepa.md). ``all_rows_in_last_block`` runs every row, as the reference does.
    """

    all_rows_in_last_block = False

    def __init__(
        self,
        grid: tuple[int, int],
        embed_dim: int,
        pred_dim: Count = 384,
        depth: Count = 6,
        num_heads: Count = 12,
        mlp_ratio: Positive = 4.0,
        drop_path_rate: DropRate = 0.0,
        grad_checkpointing: bool = False,
    ):
        super().__init__()
        self.embed = nn.Linear(embed_dim, pred_dim)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, pred_dim))
        # Frozen parameter, not a buffer: official checkpoints carry it (predictor_pos_embed).
        self.pos_embed = nn.Parameter(sincos_pos_embed(tuple(grid), pred_dim), requires_grad=False)
        rates = [drop_path_rate * i / max(1, depth - 1) for i in range(depth)]  # stochastic depth
        self.blocks = nn.ModuleList(
            RowsBlock(pred_dim, num_heads, mlp_ratio, qkv_bias=True, drop_path=r) for r in rates
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
        checkpointing = self.grad_checkpointing and self.training
        if self.all_rows_in_last_block:
            x = run_blocks(self.blocks, x, checkpointing)[:, K:]
        else:
            x = run_blocks(self.blocks[:-1], x, checkpointing)
            x = run_blocks(self.blocks[-1:], x, checkpointing, start=K)
        return self.proj(self.norm(x)).reshape(B, M, T, -1)
