"""Table models: one Base (base.py); core tables (core.py); analysis tables (analysis.py);
commit verdicts, bisections and forges (verdicts.py)."""

from mallard_api.models import analysis, calibration, core, verdicts
from mallard_api.models.base import Base

__all__ = ["Base", "analysis", "calibration", "core", "verdicts"]
