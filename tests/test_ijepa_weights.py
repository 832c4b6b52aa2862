"""I-JEPA's weight imports (model.init_from): an official checkpoint into all three parts, a
timm file into both encoders, a file that does not fit; on synthetic files, no download."""

import pytest
import torch
from test_ijepa import tiny_ijepa
from test_weights import timm_loads_strictly

from trainlab.networks.weights import PREDICTOR_KEYS, export_encoder
from trainlab.utils.errors import UserError


def official_names(predictor_state):
    """Our predictor keys -> the official ones (the inverse of PREDICTOR_KEYS)."""
    out = {}
    for key, value in predictor_state.items():
        for official, ours in PREDICTOR_KEYS:
            plain = official.strip("^$").replace("\\.", ".")
            if key.startswith(ours) and (ours.endswith(".") or key == ours):
                key = plain + key[len(ours) :]
                break
        out[key] = value
    return out


def randomised(state):
    return {k: torch.randn_like(v) for k, v in state.items()}


@pytest.mark.parametrize("prefix", ["module.", ""])
def test_official_checkpoint_loads_into_all_three_parts(tmp_path, prefix, caplog):
    model, _ = tiny_ijepa(tmp_path)
    enc, tgt = randomised(model.encoder.state_dict()), randomised(model.target_encoder.state_dict())
    pred = randomised(model.predictor.state_dict())
    official_pred = official_names(pred)
    assert "predictor_embed.weight" in official_pred and "predictor_pos_embed" in official_pred
    add = lambda sd: {prefix + k: v for k, v in sd.items()}  # noqa: E731
    path = tmp_path / "ijepa.pth.tar"
    torch.save(
        {
            "encoder": add(enc),
            "predictor": add(official_pred),
            "target_encoder": add(tgt),
            "epoch": 300,
        },
        path,
    )
    model.load_weights(str(path))
    # no config in the file, and heads change no shape: the count it assumed, in one line
    heads = model.predictor.blocks[0].attn.num_heads, model.encoder.blocks[0].attn.num_heads
    said = [
        r.getMessage() for r in caplog.records if "records no predictor heads" in r.getMessage()
    ]
    assert (
        len(said) == 1
        and f"num_heads={heads[0]} (the official code uses the encoder's: {heads[1]})" in said[0]
    )
    assert torch.equal(model.encoder.blocks[0].attn.qkv.weight, enc["blocks.0.attn.qkv.weight"])
    assert torch.equal(model.target_encoder.norm.weight, tgt["norm.weight"])
    assert torch.equal(model.predictor.embed.weight, pred["embed.weight"])
    assert torch.equal(model.predictor.pos_embed, pred["pos_embed"])


def test_timm_file_loads_into_both_encoders_and_export_round_trips(tmp_path):
    model, _ = tiny_ijepa(tmp_path)
    timm_state = randomised(model.encoder.state_dict())
    from safetensors.torch import save_file

    save_file(timm_state, str(tmp_path / "model.safetensors"))
    model.load_weights(str(tmp_path / "model.safetensors"))
    assert torch.equal(model.target_encoder.pos_embed, timm_state["pos_embed"])
    assert torch.equal(
        model.encoder.blocks[-1].mlp.fc2.weight,
        timm_state[
            next(
                k
                for k in timm_state
                if k.endswith("mlp.fc2.weight")
                and k.startswith(f"blocks.{len(model.encoder.blocks) - 1}")
            )
        ],
    )

    # Export the target encoder from a Lightning-style checkpoint; timm loads it strictly.
    ckpt = tmp_path / "last.ckpt"
    torch.save({"state_dict": model.state_dict()}, ckpt)
    out = export_encoder(ckpt, tmp_path / "encoder.pth")
    enc = model.encoder
    size = enc.patch_embed.img_size[0]
    reference = timm_loads_strictly(out, enc)
    x = torch.randn(2, 1, size, size)
    assert torch.allclose(reference.eval()(x), model.target_encoder.eval()(x), atol=1e-5)


def test_mismatched_weights_are_one_clear_error(tmp_path):
    model, _ = tiny_ijepa(tmp_path)
    state = model.encoder.state_dict()
    state["pos_embed"] = torch.zeros(1, 10, 5)
    torch.save(state, tmp_path / "wrong.pth")
    with pytest.raises(UserError, match="do not fit the configured model"):
        model.load_weights(str(tmp_path / "wrong.pth"))
    with pytest.raises(UserError, match="does not exist"):
        model.load_weights(str(tmp_path / "missing.pth"))
