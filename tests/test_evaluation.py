"""The frozen-feature protocol recovers known answers, and eval.py mode=features runs on a
trainlab checkpoint and on an official-format one."""

import json
import warnings

import pytest
import torch
from conftest import make_image_folder, run_cli
from hydra.utils import instantiate
from omegaconf import OmegaConf

from trainlab.checks.checkpoint_config import run_config_of
from trainlab.evaluation.features import Extraction, gather_shards
from trainlab.evaluation.linear_grid import linear_grid, train_heads
from trainlab.evaluation.online import OnlineEvaluator
from trainlab.evaluation.protocol import knn_choice, rate_features
from trainlab.utils.errors import ConfigError

SIZES = {"train": 600, "val": 200, "test": 300}


def labelled(seed=0):
    g = torch.Generator().manual_seed(seed)
    return {s: torch.randint(0, 10, (n,), generator=g) for s, n in SIZES.items()}


def one_view(make):
    return {"v": {s: make(s) for s in SIZES}}


def test_one_hot_label_features_score_perfectly():
    labels = labelled()
    views = one_view(lambda s: torch.nn.functional.one_hot(labels[s], 10).float())
    best, _ = linear_grid(views, labels, 10)
    assert best.test_acc == 1.0 and best.val_acc == 1.0
    assert knn_choice(views, labels, 10)[2] == 1.0


def test_noise_features_score_chance():
    labels = labelled()
    g = torch.Generator().manual_seed(1)
    views = one_view(lambda s: torch.randn(SIZES[s], 32, generator=g))
    best, _ = linear_grid(views, labels, 10)
    # chance is 0.1; 300 test images put 0.2 beyond 5 standard deviations
    assert best.test_acc < 0.2
    assert knn_choice(views, labels, 10)[2] < 0.2


def test_knn_choice_without_a_test_split_chooses_on_val_alone():
    """A recipe search reads no test image: the same view and val accuracy, no test score."""
    labels = labelled()
    g = torch.Generator().manual_seed(2)
    one_hot = torch.nn.functional.one_hot
    views = {
        "noise": {s: torch.randn(SIZES[s], 10, generator=g) for s in SIZES},
        "labels": {s: one_hot(labels[s], 10).float() for s in SIZES},
    }
    with_test = knn_choice(views, labels, 10)
    val_only = {s: labels[s] for s in ("train", "val")}
    assert knn_choice(views, val_only, 10) == (with_test[0], with_test[1], None)
    assert with_test[0] == "labels"


def test_the_ratings_knn_counts_the_neighbours_it_is_given():
    """features.knn_k reaches the rating's kNN: its accuracy is knn_choice's with that k, and
    on these features 1 and 50 neighbours read differently."""
    labels = labelled()
    g = torch.Generator().manual_seed(3)
    views = one_view(lambda s: torch.randn(SIZES[s], 8, generator=g) + labels[s][:, None] / 4)
    read = {k: rate_features(views, labels, 10, knn_k=k).knn_acc for k in (1, 50)}
    assert read == {k: knn_choice(views, labels, 10, k)[2] for k in (1, 50)}
    assert read[1] != read[50], read


def test_the_grid_chooses_on_val_and_never_looks_at_test_labels():
    labels = labelled()
    g = torch.Generator().manual_seed(2)
    signal = lambda s: torch.nn.functional.one_hot(labels[s], 10).float()  # noqa: E731
    views = {  # two views of different quality, so the choice is not a tie
        "weak": {s: signal(s) + 2.0 * torch.randn(SIZES[s], 10, generator=g) for s in SIZES},
        "strong": {s: signal(s) + 0.5 * torch.randn(SIZES[s], 10, generator=g) for s in SIZES},
    }
    best, results = linear_grid(views, labels, 10)
    assert best.val_acc == max(r.val_acc for r in results)
    assert best.view == "strong"
    # Scrambled test labels change every test accuracy but not the choice.
    scrambled = {**labels, "test": labels["test"][torch.randperm(SIZES["test"], generator=g)]}
    best2, results2 = linear_grid(views, scrambled, 10)
    assert (best2.view, best2.weight_decay) == (best.view, best.weight_decay)
    assert [r.val_acc for r in results2] == [r.val_acc for r in results]
    assert best2.test_acc < best.test_acc - 0.3


@pytest.fixture(scope="module")
def digits_ckpt(tmp_path_factory):
    """A tiny checkpoint of the default job with a run dir, as train.py leaves it (2 batches)."""
    tmp = tmp_path_factory.mktemp("pretrain")
    result = run_cli(
        "train.py",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "test=false",
        "extras.print_config=false",
        "features.enabled=false",
        f"paths.log_dir={tmp}",
        "run_name=r",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return tmp / "train" / "runs" / "r" / "checkpoints" / "last.ckpt"


KEYS = [
    "features/linear_acc",
    "features/knn_acc",
    "baseline/pixels_linear_acc",
    "baseline/pixels_knn_acc",
    "baseline/random_linear_acc",
    "baseline/random_knn_acc",
]


def test_a_grid_point_is_the_same_fit_alone_or_among_the_others():
    """Each weight decay is its own L-BFGS problem: the online probe fits one grid point and
    must get the protocol's head. (Fitted as one summed problem, the heads shared L-BFGS's
    line search and history, and the 1e-6 head on real features moved by 7 points.)"""
    labels = labelled()
    g = torch.Generator().manual_seed(3)
    signal = lambda s: torch.nn.functional.one_hot(labels[s], 10).float()  # noqa: E731
    x = torch.cat([signal("train"), torch.randn(SIZES["train"], 100, generator=g)], dim=1)
    x = x + 1.5 * torch.randn(x.shape, generator=g)
    grid = train_heads(x, labels["train"], 10, (1e-5, 1e-3, 1e-1), max_iter=30)
    alone = train_heads(x, labels["train"], 10, (1e-3,), max_iter=30)
    assert torch.allclose(grid.weight[1], alone.weight[0], atol=1e-5)
    assert torch.allclose(grid.bias[1], alone.bias[0], atol=1e-5)
    assert not torch.allclose(grid.weight[0], grid.weight[2], atol=1e-3)  # wd does matter


def grid_against_scikit_learn(x: torch.Tensor, y: torch.Tensor, num_classes: int):
    """Each weight decay's (index, wd, our objective, scikit-learn's optimum, its model,
    our heads): mean cross-entropy + wd/2 |W|^2, scikit-learn's C being 1 / (n wd)."""
    from sklearn.linear_model import LogisticRegression

    from trainlab.evaluation.linear_grid import WEIGHT_DECAYS

    def objective(weight, bias, wd):
        weight, bias = torch.as_tensor(weight).double(), torch.as_tensor(bias).double()
        cross_entropy = torch.nn.functional.cross_entropy(x.double() @ weight.T + bias, y)
        return float(cross_entropy + 0.5 * wd * weight.pow(2).sum())

    heads = train_heads(x, y, num_classes, WEIGHT_DECAYS)
    assert all(converged for _, _, converged in heads.stops), heads.stops
    for h, wd in enumerate(WEIGHT_DECAYS):
        reference = LogisticRegression(C=1 / (len(x) * wd), tol=1e-10, max_iter=20_000)
        reference.fit(x.numpy(), y.numpy())
        best = objective(reference.coef_, reference.intercept_, wd)
        ours = objective(heads.weight[h].detach(), heads.bias[h].detach(), wd)
        yield h, wd, ours, best, reference, heads


def test_every_grid_point_reaches_scikit_learns_optimum_with_constant_features():
    """Standardised digits (3 of their 64 pixels are constant): each weight decay's fit ends
    within 1e-4 of the optimum scikit-learn's LogisticRegression finds for the same
    objective, mean cross-entropy + wd/2 |W|^2 (its C is 1 / (n wd)), and predicts alike.
    Whitening the constant pixels too left the fits 1 to 20 % above it."""
    from sklearn.datasets import load_digits

    pixels, digits = load_digits(return_X_y=True)
    x = torch.tensor(pixels, dtype=torch.float32)
    x = (x - x.mean(dim=0)) / x.std(dim=0).clamp(min=1e-12)
    y = torch.tensor(digits)
    assert (x.std(dim=0) == 0).sum() == 3
    for h, wd, ours, best, reference, heads in grid_against_scikit_learn(x, y, 10):
        assert abs(ours - best) <= 1e-4 * best, (wd, ours, best)
        predicted = (x @ heads.weight[h].T + heads.bias[h]).argmax(dim=1).numpy()
        assert (predicted == reference.predict(x.numpy())).mean() > 0.995, wd


def test_every_grid_point_converges_where_the_features_variances_differ_widely():
    """Digits' pixels as the images hold them, in [0, 1], not standardised: their variances
    span 4 orders of magnitude. Every weight decay's fit converges, those from 1e-4 up in
    under 200 iterations (whitening alone left all five cut off at 300, the 1e-1 fit's
    largest gradient 0.9). That a converged fit is scikit-learn's optimum, the tests above
    show."""
    from sklearn.datasets import load_digits

    from trainlab.evaluation.linear_grid import WEIGHT_DECAYS

    pixels, digits = load_digits(return_X_y=True)
    x, y = torch.tensor(pixels, dtype=torch.float32) / 16, torch.tensor(digits)
    heads = train_heads(x, y, 10, WEIGHT_DECAYS)
    for wd, (iterations, gradient, converged) in zip(WEIGHT_DECAYS, heads.stops, strict=True):
        assert converged and gradient < 1e-4, (wd, iterations, gradient)
        assert wd < 1e-4 or iterations < 200, (wd, iterations)


def test_with_fewer_images_than_dimensions_every_grid_point_reaches_the_optimum():
    """60 images of 500 dimensions (the pixel view of a few photos): the fits run in the
    images' span with the penalty read from P's column norms, and each weight decay still
    ends within 1e-4 of scikit-learn's optimum of mean cross-entropy + wd/2 |W|^2, W in
    the features' own 500 dimensions."""
    g = torch.Generator().manual_seed(0)
    y = torch.arange(60) % 3
    x = torch.randn(3, 500, generator=g)[y] * 0.3 + torch.randn(60, 500, generator=g)
    for _, wd, ours, best, _, _ in grid_against_scikit_learn(x, y, 3):
        # N < D is separable: at 1e-5 the optimum is about 3e-5, and ours ends below
        # scikit-learn's there (by 2e-4 of it), so the bound is one-sided
        assert ours - best <= 1e-4 * best, (wd, ours, best)


def test_a_probe_cut_off_before_converging_says_so(caplog):
    """Each grid point records L-BFGS's iterations, the largest gradient where it stopped and
    whether it converged; a chosen point cut off by max_iter is said in one warning."""
    import logging

    from sklearn.datasets import load_digits

    pixels, digits = load_digits(return_X_y=True)
    x = torch.tensor(pixels, dtype=torch.float32)
    x = (x - x.mean(dim=0)) / x.std(dim=0).clamp(min=1e-12)
    y = torch.tensor(digits)
    views, labels = {"pixels": {"train": x, "val": x, "test": x}}, {"train": y, "val": y, "test": y}
    with caplog.at_level(logging.WARNING):
        best, _ = linear_grid(views, labels, 10, weight_decays=(1e-2,))
        assert best.converged and best.iterations < 300 and best.gradient < 1e-4, best
        assert "cut off" not in caplog.text
        short, _ = linear_grid(views, labels, 10, weight_decays=(1e-2,), max_iter=20)
    assert not short.converged and short.iterations == 20 and short.gradient > best.gradient
    assert "was cut off after 20 L-BFGS iterations, not converged" in caplog.text


def test_the_ratings_bars_leave_no_blank_lines_where_the_output_is_no_terminal(capsys):
    """A log file or a pipe gets the rating's lines, not a blank line for each progress bar
    (rich draws a transient bar as one there); on a terminal the bars show, with their ETA."""
    from torch.utils.data import TensorDataset

    from trainlab.evaluation.features import extract

    data = TensorDataset(torch.randn(8, 1, 4, 4), torch.arange(8) % 2)
    feats, y = extract(lambda x: {"pixels": x.flatten(1)}, data, desc="pixels train")
    views = {"pixels": {"train": feats["pixels"], "val": feats["pixels"], "test": feats["pixels"]}}
    linear_grid(views, {"train": y, "val": y, "test": y}, 2, weight_decays=(1e-2,), desc="pixels")
    assert capsys.readouterr().out == ""


def test_whitening_fewer_images_than_dimensions_is_the_covariances():
    """With N < D the whitening comes from the N x N Gram matrix: the same P P^T (the
    covariance's pseudo-inverse) as the D x D covariance's eigenvectors give, and whitened
    coordinates of identity covariance."""
    from trainlab.evaluation.linear_grid import whitening

    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 30, generator=g) @ torch.randn(30, 200, generator=g) + 3  # rank 30
    mean, P = whitening(x)
    eigval, eigvec = torch.linalg.eigh(torch.cov((x - x.mean(dim=0)).T.double()))
    kept = eigval > 1e-6 * eigval.max()
    reference = eigvec[:, kept] * eigval[kept].rsqrt()
    assert P.shape == reference.shape == (200, 30)
    inverse = reference @ reference.T
    assert torch.allclose(P.double() @ P.double().T, inverse, atol=1e-6 * inverse.abs().max())
    whitened = ((x - mean) @ P).double()
    assert torch.allclose(torch.cov(whitened.T), torch.eye(30, dtype=torch.float64), atol=1e-5)


def test_the_pixel_baseline_keeps_small_images_and_pools_large_ones_to_32px():
    """The embedded sets' images (28 and 32 px) keep every pixel; a photo at 224 px is its
    32 x 32 average: 3,072 features, not 150,528."""
    from trainlab.evaluation.features import pixel_views

    digits = torch.randn(5, 1, 28, 28)
    assert torch.equal(pixel_views(digits)["pixels"], digits.flatten(1))
    photos = torch.randn(5, 3, 224, 160)
    pooled = pixel_views(photos)["pixels"]
    assert pooled.shape == (5, 3 * 32 * 32)
    block = photos[:, :, :7, :5].mean(dim=(2, 3))  # 224 / 32 = 7 rows, 160 / 32 = 5 columns
    assert torch.allclose(pooled.reshape(5, 3, 32, 32)[:, :, 0, 0], block, atol=1e-6)


def test_the_grid_rates_224px_rgb_pixels_without_a_dimension_squared():
    """The pixels of 224 px RGB photos are 150,528 features: their covariance in float64
    would take 181 GB. 40 such images are rated in memory linear in the dimension."""
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(40) % 2
    pixels = torch.rand(40, 3 * 224 * 224, generator=g) + 0.05 * labels[:, None]
    heads = train_heads(pixels, labels, 2, weight_decays=(1e-3,), max_iter=30)
    assert (heads(pixels)[0].argmax(dim=1) == labels).float().mean() == 1.0


@pytest.mark.slow  # a pre-training and two eval.py runs, 50 s: make test-slow (CI runs it);
# make test rates features at the end of the default job (test_train.py)
def test_eval_features_rates_a_trainlab_checkpoint_against_its_baselines(digits_ckpt, tmp_path):
    result = run_cli(
        "eval.py",
        "mode=features",
        f"ckpt_path={digits_ckpt}",
        f"paths.log_dir={tmp_path}",
        "run_name=e",
        "extras.print_config=false",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads((tmp_path / "eval" / "runs" / "e" / "metrics.json").read_text())
    assert sorted(out["metrics"]) == sorted(KEYS)
    # digits at 16 px: a linear probe on raw pixels is far above chance (0.1)
    assert out["metrics"]["baseline/pixels_linear_acc"] > 0.8
    assert out["chosen"]["features"]["linear"]["view"] in {"last", "last+bn", "last4", "last4+bn"}
    assert "baseline/pixels_linear_acc" in result.stdout or "pixels" in result.stdout
    # The same checkpoint on a user's own folder: gray images, the checkpoint's input format
    # (16 px, 1 channel, its normalisation), val/ as the test split and val held out of train.
    root = make_image_folder(tmp_path / "folder", per_class=10, size=20)
    result = run_cli(
        "eval.py",
        "mode=features",
        f"ckpt_path={digits_ckpt}",
        "data=imagefolder",
        f"data.root={root}",
        "data.num_classes=2",
        "data.num_workers=0",
        "features.baselines=false",
        f"paths.log_dir={tmp_path}",
        "run_name=folder",
        "extras.print_config=false",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    run = tmp_path / "eval" / "runs" / "folder"
    data = OmegaConf.load(run / "config.yaml").data
    assert (data.image_size, data.in_chans, data.holdout_val) == (16, 1, False)
    # val/ is the folder's test split: the protocol chose on train/ held out (data/base.py)
    assert "val is the test split" in result.stdout + result.stderr
    metrics = json.loads((run / "metrics.json").read_text())["metrics"]
    assert metrics["features/linear_acc"] == 1.0  # two classes of flat gray levels 40 apart


def test_a_run_dir_naming_a_class_trainlab_no_longer_has_is_refused_in_one_line(tmp_path):
    """Class paths are not translated: a run dir written by another layout names a class this
    package lacks, and opening it is a ConfigError naming the key, before anything is built."""
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "config.yaml").write_text(
        "model:\n  _target_: trainlab.model.vicreg.VICReg\n  encoder:\n"
        "    _target_: trainlab.models.vit.ViTEncoder\n    img_size: 16\n"
    )
    with pytest.raises(ConfigError, match="model.encoder._target_") as refused:
        run_config_of(tmp_path / "checkpoints" / "last.ckpt")
    assert "\n" not in str(refused.value)
    (tmp_path / "config.yaml").write_text(
        "model:\n  _target_: trainlab.model.vicreg.VICReg\n  encoder:\n"
        "    _target_: trainlab.networks.vit.ViTEncoder\n    img_size: 16\n    in_chans: 1\n"
        "    patch_size: 4\n    size: vit_tiny\n    depth: 1\n"
    )
    cfg = run_config_of(tmp_path / "checkpoints" / "last.ckpt")
    assert instantiate(cfg.model.encoder).grid == (4, 4)


def test_sharded_features_are_gathered_back_in_order():
    """gather_shards: ranks hold rows rank::2 of 7 (4 and 3, padded to 4 for all_gather);
    each rank rebuilds all 7 rows in order (the fake all_gather returns what both send)."""
    x = torch.randn(7, 5)

    def padded(rank):
        shard = x[rank::2]
        return torch.cat([shard, shard.new_zeros(4 - len(shard), 5)])

    how = [
        Extraction(rank=r, world_size=2, all_gather=lambda t: torch.stack([padded(0), padded(1)]))
        for r in (0, 1)
    ]
    for rank in (0, 1):
        assert torch.equal(gather_shards(x[rank::2], 7, how[rank]), x)


def test_a_rank_whose_shard_is_empty_still_gathers_every_feature():
    """One image on 2 ranks: rank 1 has none to extract and sends 0 rows of the right width
    (padded to rank 0's one), so that the gather ends with the image's features on rank 1
    too (here all_gather stands for Lightning's: rank 0's shard, then this rank's)."""
    from torch.utils.data import TensorDataset

    from trainlab.evaluation.features import extract

    data = TensorDataset(torch.ones(1, 3), torch.tensor([4]))
    views = lambda x: {"double": 2 * x}  # noqa: E731
    rank_0 = lambda x: torch.full_like(x, 2)  # noqa: E731  rank 0's shard, padded: 1 row
    how = Extraction(rank=1, world_size=2, all_gather=lambda x: torch.stack([rank_0(x), x]))
    feats, labels = extract(views, data, how=how)
    assert torch.equal(feats["double"], torch.full((1, 3), 2.0)) and labels.tolist() == [2]


def test_the_monitors_collapse_stats_leave_out_the_std_of_one_image():
    """A small folder's validation split can hold one image: RankMe is defined, the std of one
    feature vector is not (torch warns and returns nan)."""
    monitor = OnlineEvaluator(dim=8, num_classes=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        one = monitor.collapse_stats(torch.randn(1, 8))
    assert set(one) == {"rankme", "rankme_centred"}, one
    many = monitor.collapse_stats(torch.randn(16, 8))
    assert set(many) == {"rankme", "rankme_centred", "feat_std"}
    assert all(torch.isfinite(v) for v in many.values()), many
