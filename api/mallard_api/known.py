"""The suites a job may name, and their workloads (the peers and variant keys a job may
use are `mallard_wire.names`, shared with the runner).

Whatever a request names here ends up on a runner (a peer to LD_PRELOAD, a variant to
turn into an environment variable, a suite file to read), so it is checked against
these sets at the API, and a request naming anything else is a 422 naming the field.

- Suites: the runner's suite files, `<suites_dir>/<name>.yaml` (`MALLARD_SUITES_DIR`, by
  default the repository's `runner/suites`), read when the app starts and again when a
  request names a suite not seen yet (a file added since); a job's suite is one of
  their names and its workloads are among that suite's workloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml


class CatalogError(ValueError):
    """The suites folder cannot be read; the message says why (start-up stops)."""


@dataclass
class Catalog:
    """Suite name -> the workloads it runs."""

    suites: dict[str, frozenset[str]]
    folder: Path | None = None

    @classmethod
    def load(cls, folder: Path) -> Catalog:
        return cls(cls._read(Path(folder)), Path(folder))

    def _reload(self) -> None:
        if self.folder is not None:
            try:
                self.suites = self._read(self.folder)
            except CatalogError:
                pass  # keep what was read at start

    @staticmethod
    def _read(folder: Path) -> dict[str, frozenset[str]]:
        if not folder.is_dir():
            raise CatalogError(f"MALLARD_SUITES_DIR: {folder} is not a folder of suite files")
        suites: dict[str, frozenset[str]] = {}
        for path in sorted(folder.glob("*.yaml")):
            try:
                data = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError) as exc:
                raise CatalogError(f"MALLARD_SUITES_DIR: cannot read {path}: {exc}") from exc
            workloads = data.get("workloads") if isinstance(data, dict) else None
            if not isinstance(workloads, dict) or not workloads:
                raise CatalogError(f"MALLARD_SUITES_DIR: {path} names no workloads")
            suites[path.stem] = frozenset(str(w) for w in workloads)
        if not suites:
            raise CatalogError(f"MALLARD_SUITES_DIR: no *.yaml suite in {folder}")
        return suites

    def check_suite(self, name: str) -> str | None:
        """None when the suite is known (read again once if not), else the reason."""
        if name not in self.suites:
            self._reload()
        if name in self.suites:
            return None
        return f"unknown suite {name!r}; known: {', '.join(sorted(self.suites))}"

    def check_workloads(self, suite: str, workloads: list[str] | None) -> str | None:
        """None when every workload is in the suite, else the reason."""
        if suite not in self.suites:
            self._reload()
        unknown = sorted(set(workloads or ()) - self.suites.get(suite, frozenset()))
        if not unknown:
            return None
        return (f"workload(s) {', '.join(unknown)} not in suite {suite!r}; it runs "
                f"{', '.join(sorted(self.suites.get(suite, ())))}")
