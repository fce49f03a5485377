"""Secrets out of logs: one function both sides run on a log before it is stored.

A build log or a workload's stderr is written by the code under test, so it may hold
whatever that code could read. The runner scrubs a failure log before it spools it and
the API scrubs it again before it stores it; both call `scrub`. What it replaces:

- the API's tokens (`mlrd_` and 43 URL-safe characters: `mallard_api.auth.new_token`);
- the value after `Bearer` and of an `Authorization:` header;
- forge tokens: GitHub (`ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_`, `github_pat_`), GitLab
  (`glpat-`);
- the value of an environment variable whose name says it is a secret (`*TOKEN*`,
  `*SECRET*`, `*PASSWORD*`, `*PASSWD*`, `*API_KEY*`, `*PRIVATE_KEY*`), as
  `/proc/<pid>/environ` or `env` print it;
- the password of a URL (`scheme://user:password@host`);
- every value of `known` (the caller's own secrets: the runner's token, the API's
  bootstrap token) of at least `KNOWN_MIN` characters.

It is a second line: what keeps a secret from the code under test is that the code never
can read it (runner/README.md, "Security"); a program that reads one can still encode it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "[redacted]"
KNOWN_MIN = 8  # shorter "secrets" would blank ordinary words of a log

_SECRET_NAME = r"(?:[A-Za-z_][A-Za-z0-9_]*)?(?:TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|PRIVATE_KEY)" \
               r"[A-Za-z0-9_]*"
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"mlrd_[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"\b(gh[opusr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
                r"|glpat-[A-Za-z0-9_-]{20,})"), REDACTED),
    (re.compile(r"(?i)\b(authorization\s*[:=]\s*)(?:bearer\s+|basic\s+|token\s+)?"
                r"[^\s\x00\"']+"), rf"\1{REDACTED}"),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), rf"\1{REDACTED}"),
    (re.compile(rf"(?i)\b({_SECRET_NAME})=[^\s\x00]+"), rf"\1={REDACTED}"),
    (re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@\x00]+:)[^\s@/\x00]+@"),
     rf"\1{REDACTED}@"),
)


def scrub(text: str, known: Iterable[str | None] = ()) -> str:
    """`text` with every token-shaped string and every value of `known` replaced by
    `[redacted]`."""
    for value in sorted({k for k in known if k and len(k) >= KNOWN_MIN}, key=len,
                        reverse=True):
        text = text.replace(value, REDACTED)
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text
