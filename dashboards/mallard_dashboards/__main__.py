"""`python -m mallard_dashboards [--check]` from dashboards/ (or dashboards/generate.py)."""

from .generate import main

raise SystemExit(main())
