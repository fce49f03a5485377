"""Field types and shapes shared by every request and response body.

Every input type is bounded so that what passes validation can be stored: no NUL
characters or lone surrogates in text (PostgreSQL rejects them), finite floats only,
integers within their column's range. A violation is a 422 that names the field.
"""


from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)

from mallard_api.fields import (
    GitRef,
    Word,
    check_json,
)

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


# Text PostgreSQL can store: no NUL (the pattern), no lone surrogates (pydantic-core
# refuses those for any constrained string). Checked in Rust, not in a Python callback.
NO_NUL = r"^[^\x00]*$"
Text = Annotated[str, StringConstraints(max_length=1_000_000, pattern=NO_NUL)]


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _clean_log(value: Any) -> Any:
    """Logs and stderr tails are kept, not rejected: characters PostgreSQL cannot store
    (NUL, lone surrogates) become U+FFFD (before the string is validated: pydantic
    refuses lone surrogates in any constrained string)."""
    return _UNSTORABLE.sub("\ufffd", value) if isinstance(value, str) else value


LogText = Annotated[str, StringConstraints(max_length=1_000_000), BeforeValidator(_clean_log)]


Str200 = Annotated[str, StringConstraints(max_length=200, pattern=NO_NUL)]
Str500 = Annotated[str, StringConstraints(max_length=500, pattern=NO_NUL)]


Name = Annotated[
    str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True,
                           pattern=NO_NUL),
]
Sha = Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{4,64}$")]
MeasureName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$")]
MAX_MEASURES = 24  # per trial: the measures object is kept inside the series index entry
JsonObject = Annotated[dict[str, Any], AfterValidator(check_json)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
Int32 = Annotated[int, Field(ge=-(2**31), le=INT32_MAX)]
RunnerId = Annotated[int, Field(ge=1, le=INT32_MAX)]
JobId = Annotated[int, Field(ge=1, le=INT64_MAX)]
LeaseSeconds = Annotated[int, Field(ge=1, le=7 * 86400)]


class InModel(BaseModel):
    """Every request body: a field it does not know (a misspelling) is a 422 naming it."""

    model_config = ConfigDict(extra="forbid")


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorOut(BaseModel):
    detail: list[ErrorItem] | str


class Health(BaseModel):
    status: str
    database: str


RepoUrl = Annotated[str, StringConstraints(min_length=1, max_length=2000, pattern=NO_NUL)]
BranchName = Annotated[GitRef, StringConstraints(max_length=200)]

Arch = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,40}$")]
Label = Literal["base", "head", "peer"]
# what a job or comparison may ask the runner to run (None: the whole suite)
Workloads = Annotated[list[Word], Field(min_length=1, max_length=100)]
Threads = Annotated[list[Annotated[int, Field(ge=1, le=4096)]], Field(min_length=1, max_length=64)]
Warmup = Annotated[int, Field(ge=0, le=100)]
