"""Build recipes (contracts §5): how an allocator project builds, what its variants may set,
and how it reports its counters. One model for the API (a project's registered recipe,
set by an admin), the runner (which builds by it) and `.mallard.toml` (a repository's own
recipe at a commit, which wins over the registered one).

A recipe is data, never a shell string: every command is an argv list whose items are
checked here (no shell metacharacters, no absolute path, no `..`), every path is relative
to the checkout or the build folder and proven inside it again by the runner, and a
variant becomes environment variables only through `variant_env` below.
"""

from __future__ import annotations

import re
import tomllib
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, StringConstraints, model_validator

from mallard_wire.fields import InModel, RelativePath

# The file a repository may carry at a commit: its `[allocator]` table is a Recipe.
RECIPE_FILE = ".mallard.toml"
MAX_RECIPE_FILE = 64 * 1024

# --- arguments ------------------------------------------------------------------------------
# Characters a shell would read as syntax. No argv item is ever given to a shell, so these
# are refused to make a recipe mean the same to its reader as to the runner.
_SHELL = set(";|&$`<>\\\"'(){}*?[]!#~\n\r\t\x00")


def check_arg(value: str) -> str:
    """One argv item: printable, no shell syntax, no absolute path, no `..` segment."""
    bad = sorted(set(value) & _SHELL)
    if bad:
        raise ValueError(f"must not contain shell syntax {''.join(bad)!r}: a recipe is argv "
                         f"lists, never a shell string")
    if not value.isprintable():
        raise ValueError("must be printable text")
    for piece in re.split(r"[=,:]", value):  # -DX=/abs, --prefix=/abs, a:b
        if piece.startswith("/"):
            raise ValueError(f"must not name an absolute path ({piece[:60]!r}): paths are "
                             f"relative to the checkout or the build folder")
        if ".." in piece.split("/"):
            raise ValueError("must not contain a '..' segment")
    return value


Arg = Annotated[str, StringConstraints(min_length=1, max_length=500),
                AfterValidator(check_arg)]
Argv = Annotated[list[Arg], Field(min_length=1, max_length=100)]
# An executable a recipe runs: a bare program name found on the runner's PATH, or a path
# inside the tree (`./autogen.sh`, `tools/build.sh`).
_PROGRAM = re.compile(r"^(\./)?[A-Za-z0-9_][A-Za-z0-9_.+/-]{0,199}$")
# Programs that would turn an argv back into a shell string.
_SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "csh", "tcsh", "fish", "env", "eval", "xargs"}


def check_glob(value: str) -> str:
    """A library glob inside the build folder: relative segments of `[A-Za-z0-9_.+-]` and
    the glob characters `*`, `?`; `**` for any depth; no `..`, nothing hidden."""
    if value.startswith("/"):
        raise ValueError("must be a glob inside the build folder, not an absolute path")
    for part in value.split("/"):
        if part == "**":
            continue
        if not re.fullmatch(r"[A-Za-z0-9_*?+][A-Za-z0-9_.*?+-]*", part):
            raise ValueError("must be a glob inside the build folder: segments of letters, "
                             "digits, '_', '.', '+', '-', '*', '?' (or '**'), not starting "
                             "with '.', no '..'")
    return value


LibraryGlob = Annotated[str, StringConstraints(min_length=1, max_length=200),
                        AfterValidator(check_glob)]

# --- variants -------------------------------------------------------------------------------
OptionKey = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Z][A-Z0-9_]{0,63}$")]
_VALUE = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")


class Options(InModel):
    """What a variant may set, and how it reaches the allocator: each `key=value` as its own
    variable `<prefix><KEY>=value` (mimalloc's `MIMALLOC_`, mallard's `MALLARD_`), or all
    of them joined into one variable in `key:value,...` syntax (jemalloc's `MALLOC_CONF`).
    `separator` joins a key to its value in that one variable (`:` for jemalloc's
    `narenas:2`, `=` for scudo's `SCUDO_OPTIONS=release_to_os_interval_ms=0`).
    `keys`, when given, is the allow-list of keys (empty: any key of the right shape)."""

    prefix: Annotated[str, StringConstraints(pattern=r"^[A-Z][A-Z0-9_]{0,31}_$")] | None = None
    variable: EnvName | None = None
    separator: Literal[":", "="] = ":"
    keys: Annotated[list[OptionKey], Field(max_length=200)] = []

    @model_validator(mode="after")
    def _one_style(self) -> Options:
        if (self.prefix is None) == (self.variable is None):
            raise ValueError("give exactly one of prefix (one variable per key) or "
                             "variable (key:value,... in one variable)")
        return self


def parse_variant(variant: str | None) -> dict[str, str]:
    """`"a=1,b=x"` -> {"a": "1", "b": "x"}; None or "" -> {} (the default configuration).
    Keys are lower case words, values `[A-Za-z0-9_.-]`, each key once."""
    pairs: dict[str, str] = {}
    for part in (variant or "").split(","):
        if not part.strip():
            continue
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", key):
            raise ValueError(f"must be key=value[,key=value...] with lower-case keys; "
                             f"got {part[:40]!r}")
        if not _VALUE.match(value):
            raise ValueError(f"the value of {key} must be letters, digits, '_', '.' or '-'")
        if key in pairs:
            raise ValueError(f"{key} is given twice")
        pairs[key] = value
    return pairs


def check_variant(value: str) -> str:
    parse_variant(value)
    return value


Variant = Annotated[str, StringConstraints(max_length=500), AfterValidator(check_variant)]


def normalize_variant(variant: str | None) -> str | None:
    """Canonical spelling (pairs as given, whitespace stripped); None for the default."""
    return ",".join(f"{k}={v}" for k, v in parse_variant(variant).items()) or None


def show_variant(variant: str | None) -> str:
    return normalize_variant(variant) or "default"


def variant_env(options: Options | None, variant: str | None,
                extra: str | None = None) -> dict[str, str]:
    """The environment a variant runs with. `extra` (a stats hook's options) is merged
    after the variant's own pairs. An allocator without options takes no variant."""
    pairs = {**parse_variant(variant), **parse_variant(extra)}
    if not pairs:
        return {}
    if options is None:
        raise ValueError("this allocator has no runtime options: it takes no variant")
    unknown = [k for k in parse_variant(variant) if options.keys and k not in options.keys]
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)}; known: "
                         f"{', '.join(options.keys)}")
    if options.prefix is not None:
        return {f"{options.prefix}{k.upper()}": v for k, v in pairs.items()}
    assert options.variable is not None
    sep = options.separator
    return {options.variable: ",".join(f"{k}{sep}{v}" for k, v in pairs.items())}


# --- counters -------------------------------------------------------------------------------
class StatsHook(InModel):
    """How an allocator reports its counters at exit: `options` are merged into the
    variant of a trial that asks for counters (mimalloc `show_stats=1`, jemalloc
    `stats_print=true`); `file_env` names a variable the runner sets to a file in the
    trial's folder (mallard's `MALLARD_STATS_FILE`), else the report is read from stderr;
    `parser` is the reader (runner/mallard_runner/counters.py)."""

    parser: Literal["mallard", "mimalloc", "jemalloc"]
    options: Variant | None = None
    file_env: EnvName | None = None


# --- the recipe -----------------------------------------------------------------------------
MAX_BUILD_SECONDS = 3 * 3600


class Recipe(InModel):
    """How an allocator builds (docs/allocators.md).

    - `cmake`: configure `source` into a fresh build folder with `configure` options and
      build `target` (all when unset);
    - `autotools`: in a copy of `source`: `./autogen.sh` when present and `./configure`
      missing, `./configure` with `configure`, then `make` `target`;
    - `make`: in a copy of `source`: `make` `target` with `configure` as its arguments;
    - `command`: in a copy of `source`: each argv of `commands` in turn.
    The library to preload is the first match of `library` inside the build folder."""

    kind: Literal["cmake", "autotools", "make", "command"]
    source: RelativePath | None = None  # None: the repository's root
    configure: Annotated[list[Arg], Field(max_length=100)] = []
    target: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}$")] \
        | None = None
    commands: Annotated[list[Argv], Field(max_length=20)] = []
    submodules: bool = False
    library: LibraryGlob
    options: Options | None = None
    stats: StatsHook | None = None
    timeout_seconds: Annotated[int, Field(ge=10, le=MAX_BUILD_SECONDS)] = 1800

    @model_validator(mode="after")
    def _kind_fields(self) -> Recipe:
        if self.kind == "command":
            if not self.commands:
                raise ValueError("a command recipe needs commands (argv lists)")
            for argv in self.commands:
                if not _PROGRAM.match(argv[0]) or ".." in argv[0].split("/"):
                    raise ValueError(f"commands: {argv[0][:60]!r} must be a program name or "
                                     f"a path inside the tree")
                if argv[0].rsplit("/", 1)[-1] in _SHELLS:
                    raise ValueError(f"commands: {argv[0]!r} would run a shell string; give "
                                     f"the program and its arguments as argv")
        elif self.commands:
            raise ValueError(f"commands are for kind=command, not {self.kind}")
        return self


def read_recipe_file(text: str) -> Recipe | None:
    """The `[allocator]` table of a `.mallard.toml`, or None when the file has none.
    Raises ValueError (tomllib's or pydantic's, both ValueErrors) for a malformed file."""
    if len(text) > MAX_RECIPE_FILE:
        raise ValueError(f"{RECIPE_FILE} is larger than {MAX_RECIPE_FILE} bytes")
    table = tomllib.loads(text).get("allocator")
    if table is None:
        return None
    return Recipe.model_validate(table)
