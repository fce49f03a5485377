"""Table models: one Base (base.py); core tables (core.py); analysis tables (analysis.py)."""

from mallard_api.models import analysis, core
from mallard_api.models.base import Base

__all__ = ["Base", "analysis", "core"]
