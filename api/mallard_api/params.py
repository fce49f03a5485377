"""The one canonical form of a workload's params: the key that groups trials into a
comparison's cells, a report's lines and a branch's series (stored as
`workloads.params_sha256`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from pydantic import JsonValue


def params_key(params: Mapping[str, JsonValue]) -> str:
    """Canonical JSON: sorted keys, no spaces."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"))


def params_sha256(params: Mapping[str, JsonValue]) -> str:
    return hashlib.sha256(params_key(params).encode()).hexdigest()
