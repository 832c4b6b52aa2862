"""The InfoNCE part: SimCLR's contrastive loss (losses/info_nce.py), alone and over 2 ranks
of a gathered batch."""

import math

import pytest
import torch

from trainlab.losses.info_nce import InfoNCELoss


def nt_xent_as_published(z1: torch.Tensor, z2: torch.Tensor, t: float) -> torch.Tensor:
    """SimCLR's Eq. 1 written out anchor by anchor, in the paper's pairing (2k-1, 2k) of
    interleaved views: sim is the cosine similarity, the sum over k != i."""
    z = torch.stack([z1, z2], dim=1).reshape(-1, z1.shape[1])  # z_1, z'_1, z_2, z'_2, ...
    sim = lambda a, b: (a @ b) / (a.norm() * b.norm())  # noqa: E731  the paper's sim(u, v)
    total = z.new_zeros(())
    for i in range(len(z)):
        j = i + 1 if i % 2 == 0 else i - 1
        others = sum(torch.exp(sim(z[i], z[k]) / t) for k in range(len(z)) if k != i)
        total = total - torch.log(torch.exp(sim(z[i], z[j]) / t) / others)
    return total / len(z)


def test_info_nce_is_simclrs_nt_xent_on_hand_checked_values_and_gradients():
    """Two images whose views are equal, e1 and e2, at t = 1: each anchor's positive scores
    e^1 against the two orthogonal others' e^0, so the loss is -log(e / (e + 2)), that is
    log(1 + 2 / e) = 0.5514. Random batches: the loss and its gradients equal Eq. 1 written
    anchor by anchor, in float64; scaled embeddings give the same loss (cosine similarity)."""
    e = torch.eye(2, dtype=torch.float64)
    loss = InfoNCELoss(temperature=1.0)(e, e)
    assert loss.dtype == torch.float64
    assert loss.item() == pytest.approx(math.log1p(2 / math.e))
    g = torch.Generator().manual_seed(0)
    for n, d, t in [(2, 3, 0.5), (5, 4, 0.1), (8, 16, 0.07)]:
        a, b = (torch.randn(n, d, generator=g, dtype=torch.float64) for _ in range(2))
        a.requires_grad_(), b.requires_grad_()
        ours = InfoNCELoss(temperature=t)(a, b)
        published = nt_xent_as_published(a, b, t)
        torch.testing.assert_close(ours, published, rtol=1e-12, atol=1e-12)
        for got, want in zip(
            torch.autograd.grad(ours, (a, b)), torch.autograd.grad(published, (a, b)), strict=True
        ):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        scaled = InfoNCELoss(temperature=t)(3 * a, 0.5 * b)
        torch.testing.assert_close(scaled, ours, rtol=1e-12, atol=1e-12)


def test_info_nce_computes_in_float32_under_bf16_inputs():
    z = torch.randn(6, 8)
    loss = InfoNCELoss()(z.bfloat16(), z.bfloat16() + 0.1)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)


def _info_nce_rank(rank: int, world: int, store: str, a, b, out: str) -> None:
    import torch.distributed as dist

    from trainlab.networks.gather import gather_batch

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    half = len(a) // world
    mine = [x[rank * half : (rank + 1) * half].clone().requires_grad_() for x in (a, b)]
    loss = InfoNCELoss(temperature=0.2)(*(gather_batch(x) for x in mine))
    loss.backward()
    torch.save({"loss": loss.detach(), "grads": [x.grad for x in mine]}, f"{out}.{rank}")
    dist.destroy_process_group()


@pytest.mark.slow  # two gloo processes: make test-slow, which CI runs
def test_info_nce_on_2_ranks_of_a_gathered_batch_is_the_loss_of_one_process(tmp_path):
    """Each rank holds half of both views and gathers them: every rank's loss is the whole
    batch's, and each rank's rows get the one-process gradient times the world size, which
    DDP's average of the parameter gradients turns back into one process's."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(8, 5, generator=g, dtype=torch.float64) for _ in range(2))
    whole = [x.clone().requires_grad_() for x in (a, b)]
    expected = InfoNCELoss(temperature=0.2)(*whole)
    expected.backward()
    out = str(tmp_path / "rank")
    torch.multiprocessing.spawn(
        _info_nce_rank, args=(2, str(tmp_path / "store"), a, b, out), nprocs=2, join=True
    )
    for rank in range(2):
        got = torch.load(f"{out}.{rank}", weights_only=True)
        torch.testing.assert_close(got["loss"], expected.detach(), rtol=1e-12, atol=1e-12)
        for grad, full in zip(got["grads"], whole, strict=True):
            torch.testing.assert_close(grad / 2, full.grad[rank * 4 : (rank + 1) * 4])
