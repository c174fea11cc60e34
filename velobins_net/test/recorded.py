"""Network outputs recorded once, to hold every later implementation of the model to them.

The values in ``data/recorded_outputs.json`` were written by the fused implementation (commit
6226601, before the model became readable modules) with ``python velobins_net/test/recorded.py``;
``test_model.py`` compares today's model with them. Re-record only when the network's function
changes on purpose, and say so in the commit.

Inputs and weights do not depend on PyTorch's random stream or on the order in which modules
create their parameters: every window comes from a seeded generator, and every parameter of a
"fixed" model is drawn from a generator seeded by its state-dict name. So a rewrite that keeps the
state-dict keys (which checkpoints need anyway) sees exactly the recorded weights.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import torch

from velobins_common.constants import ROTOR_SPEED
from velobins_net.checkpoint import model_from_checkpoint, read_checkpoint
from velobins_net.config import ModelConfig
from velobins_net.model import NetOutput, VeloBinsNet
from velobins_net.pretrained import MODELS_DIR

RECORD = Path(__file__).with_name("data") / "recorded_outputs.json"
WINDOWS = 8
"""Windows per recorded batch."""

FIXED_CONFIGS: dict[str, dict[str, Any]] = {
    "spe": {},
    "spe-speed": {"rotor_kind": "speed"},
    "pe": {"bin_encoding": "pe"},
    "direct": {"bin_encoding": "direct"},
    "m-head": {"cov_head": True, "uncertainty": "B+C"},
    "reg": {"head": "reg", "uncertainty": "C"},
    "one-layer": {"num_layers": 1, "rotor_kind": "speed"},
}
"""Small models (N = 16 bins) with weights drawn per parameter name: every head and encoder option.
Normalised by statistics of other fixed windows, as training normalises by the training set's."""

SHIPPED = ("crazyflie", "crazyflie-reg")
"""Shipped checkpoints (velobins_net/models)."""

OUTPUTS = ("v", "var", "logits", "bin_var", "log_sigma", "rtmo_sigma")


def fixed_config(name: str) -> ModelConfig:
    """The :class:`ModelConfig` of a fixed model."""
    return ModelConfig(num_bins=16, velocity_range=2.0, **FIXED_CONFIGS[name])


def fixed_model(name: str) -> VeloBinsNet:
    """A fixed model in eval mode: each parameter drawn from a generator seeded by its name, fixed normalisation."""
    model = VeloBinsNet(fixed_config(name))
    with torch.no_grad():
        for pname, p in model.named_parameters():
            gen = torch.Generator().manual_seed(zlib.crc32(pname.encode()))
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            if pname.endswith(("norm.weight", "norm1.weight", "norm2.weight", "gamma")):
                value = 1.0 + 0.1 * noise  # LayerNorm gains and SPE frequencies scatter around 1
            elif p.dim() == 1:
                value = 0.1 * noise
            else:
                value = noise / p[0].numel() ** 0.5
            p.copy_(value.float())
        x = fixed_windows(model.cfg, 32, seed=1).flatten(0, 1)
        if model.cfg.rotor_kind == ROTOR_SPEED:
            x[:, 6:] = x[:, 6:].square()  # the statistics are of ω², as data.fit_normalization fits them
        model.set_normalization(x.mean(0), x.std(0))
    return model.eval()


def shipped_model(name: str) -> VeloBinsNet:
    """A shipped checkpoint, loaded as the suite loads it."""
    path = MODELS_DIR / f"{name}.pt"
    return model_from_checkpoint(read_checkpoint(path), path)  # type: ignore[return-value]


def fixed_windows(cfg: ModelConfig, batch: int = WINDOWS, seed: int = 0) -> torch.Tensor:
    """Plausible raw windows (B, T, 6+K): specific force near g, rates of a few rad/s, rotors in range."""
    gen = torch.Generator().manual_seed(seed)
    t, k = cfg.window_len, cfg.num_rotors
    acc = 2.0 * torch.randn(batch, t, 3, generator=gen) + torch.tensor([0.0, 0.0, 9.81])
    gyro = 1.5 * torch.randn(batch, t, 3, generator=gen)
    base = 0.5 + 0.2 * torch.rand(batch, 1, k, generator=gen)
    rotor = base + 0.05 * torch.randn(batch, t, k, generator=gen)
    if cfg.rotor_kind == ROTOR_SPEED:
        rotor = 2000.0 * rotor  # rad/s
    return torch.cat([acc, gyro, rotor], dim=-1)


def as_lists(out: NetOutput, logits: bool = True) -> dict[str, Any]:
    """The recorded fields of an output as nested lists (None where the model has none; logits only if asked)."""
    names = OUTPUTS if logits else tuple(n for n in OUTPUTS if n != "logits")
    return {name: None if getattr(out, name) is None else getattr(out, name).tolist() for name in names}


def record() -> dict[str, Any]:
    """Outputs of every fixed and shipped model on its fixed windows."""
    torch.set_num_threads(1)
    models = {f"fixed/{name}": fixed_model(name) for name in FIXED_CONFIGS}
    models |= {f"shipped/{name}": shipped_model(name) for name in SHIPPED}
    with torch.inference_mode():  # the shipped models' 3 × 512 logits per window are left out (size)
        return {key: as_lists(m(fixed_windows(m.cfg)), key.startswith("fixed")) for key, m in models.items()}


if __name__ == "__main__":
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(record(), indent=None, separators=(",", ":")) + "\n")
    print(f"wrote {RECORD}")
