"""Session fixtures: every overlay rendered once, from a copy of k8s/ (k8s_helpers.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from k8s_helpers import OVERLAYS, copy_k8s, kustomize


@pytest.fixture(scope="session")
def k8s_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_k8s(tmp_path_factory.mktemp("k8s"))


@pytest.fixture(scope="session")
def rendered(k8s_copy: Path) -> dict[str, list[dict[str, Any]]]:
    """overlay name -> its rendered objects."""
    return {name: kustomize(k8s_copy / "overlays" / name) for name in OVERLAYS}
