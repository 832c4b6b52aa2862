"""The training sampler: each epoch's order and each sample's augmentation come from the seed.

torch's DistributedSampler already orders an epoch by (seed, epoch) alone; this one also
hands every sample a seed for its augmentation, derived from (seed, epoch, index). Then
a resumed run, a run with more workers, or one on another number of ranks crops every
sample exactly as the uninterrupted run did; with the global RNG (the default), the crops
would depend on how many draws happened before, in which process.
"""

from collections.abc import Iterator

from torch.utils.data import DistributedSampler

from trainlab.utils.seeding import derived_seed


class SeededSampler(DistributedSampler):
    """Yields ``(index, augmentation seed)``; used on one process too (num_replicas=1).

    Being a DistributedSampler, Lightning keeps it (it only replaces other samplers) and
    calls ``set_epoch`` on it every epoch, also after a resume.
    """

    def __iter__(self) -> Iterator[tuple[int, int]]:
        for index in super().__iter__():
            yield index, derived_seed(self.seed, self.epoch, index)
