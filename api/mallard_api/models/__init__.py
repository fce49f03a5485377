"""Table models: one Base (base.py); core tables (core.py); analysis tables (analysis.py)."""

import importlib

from mallard_api.models import core
from mallard_api.models.base import Base

try:  # the analysis tables (models/analysis.py), once they exist
    importlib.import_module("mallard_api.models.analysis")
except ModuleNotFoundError as exc:  # pragma: no cover - only before analysis.py exists
    if exc.name != "mallard_api.models.analysis":
        raise
importlib.import_module("mallard_api.models.verdicts")  # migration 0008

__all__ = ["Base", "core"]
