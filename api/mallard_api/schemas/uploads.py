"""POST /api/v1/uploads: what the query names (the file is the body) and the answer."""

from __future__ import annotations

from typing import Literal

from mallard_wire.fields import AllocatorName, BranchName, FullSha, Name
from mallard_wire.results import TestbedIn
from pydantic import BaseModel, ConfigDict, Field

Format = Literal["gbench", "hyperfine", "bmf", "pytest-benchmark"]


class UploadQuery(TestbedIn):
    """The upload's query: where the trials go, and the testbed they ran on (the fields of
    `TestbedIn`, `arch` required, as query parameters: `smt=true`, `page_size=4096`).
    Any other parameter is a 422 naming it."""

    model_config = ConfigDict(extra="forbid", strict=False)

    project: Name
    format: Format = Field(description="the harness that wrote the file")
    commit: FullSha = Field(description="the measured commit's full sha")
    branch: BranchName | None = Field(
        default=None, description="the branch the commit is on (the project's default "
                                  "branch when not given)")
    allocator: AllocatorName | None = Field(
        default=None, description="the measured allocator's name (the project's name when "
                                  "not given)")

    def testbed(self) -> TestbedIn:
        return TestbedIn.model_validate(self.model_dump(include=set(TestbedIn.model_fields)))


class UploadOut(BaseModel):
    format: Format
    project: str
    branch: str
    commit: str
    allocator: str
    trials: int = Field(description="trials the file made")
    stored: int = Field(description="trials newly stored")
    duplicates: int = Field(description="trials stored already (the same file uploaded again)")
    cells: int = Field(description="workloads x params")
    measures: list[str]
    notes: list[str] = Field(description="what the format's reader says of the file")
