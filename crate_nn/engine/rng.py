"""The random generators of a run: seeding them (`seed_everything`) and the states a checkpoint saves so that a
resumed run draws what the uninterrupted run would have drawn (`rng_state`, `set_rng_state`)."""
from __future__ import annotations

import random

import numpy as np
import torch


def rng_state() -> dict:
    """Python, NumPy, torch and CUDA generator states in weights_only-safe types (numpy's array as a tensor)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": list(random.getstate()[1]) + [random.getstate()[2]],
        "python_version": random.getstate()[0],
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    """Inverse of ``rng_state``."""
    python = state["python"]
    random.setstate((state["python_version"], tuple(python[:-1]), python[-1]))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators with ``seed``."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
