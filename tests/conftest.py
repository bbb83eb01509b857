from __future__ import annotations

import os
from pathlib import Path

import pytest

# Tiny models gain nothing from threads, and OpenMP threads that spin-wait for a core another
# process holds slow a tiny forward from milliseconds to seconds: tests run single-threaded.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Whether a test's runs come out noisy must not depend on what else the machine runs: the noise
# guard is off here, and tests/test_noise.py switches it on with a made-up machine load.
os.environ.setdefault("SPECMOE_NOISE_GUARD", "0")


@pytest.fixture(scope="session")
def tiny_zoo(tmp_path_factory) -> Path:
    """The tiny zoo, built once per test session (seconds)."""
    from specmoe.zoo import build_zoo

    out = tmp_path_factory.mktemp("zoo") / "tiny"
    build_zoo("tiny", out, seed=0)
    return out


@pytest.fixture(scope="session")
def exact_models(tiny_zoo):
    """Tiny zoo models loaded in float64, the exact reference."""
    from specmoe.api import load_model

    return {name: load_model(tiny_zoo / name, dtype="float64") for name in ("moe", "dense-s", "draft-xs")}
