"""The log scrubber (scrub.py): what a build could print of the secrets it read is gone,
and an ordinary build log is left as it was."""

from __future__ import annotations

import secrets

import pytest
from mallard_wire.scrub import REDACTED, scrub

API_TOKEN = "mlrd_" + secrets.token_urlsafe(32)  # the shape of mallard_api.auth.new_token


@pytest.mark.parametrize("leak", [
    API_TOKEN,
    f"MALLARD_RUNNER_TOKEN={API_TOKEN}",
    f"PATH=/usr/bin\x00MALLARD_RUNNER_TOKEN={API_TOKEN}\x00HOME=/root",
    f"Authorization: Bearer {API_TOKEN}",
    f"curl -H 'Authorization: Bearer {API_TOKEN}' http://api:8000",
    f"bearer {API_TOKEN}",
    "GITHUB_TOKEN=ghp_" + "A1b2" * 9,
    "push with github_pat_" + "x1Y2_" * 8,
    "glpat-" + "a1B2c3" * 4,
    "MALLARD_BOOTSTRAP_ADMIN_TOKEN=something-long-and-secret",
    "POSTGRES_PASSWORD=hunter2hunter2",
    "db_password=hunter2hunter2",
    "DATABASE_URL=postgresql+psycopg://mallard:hunter2hunter2@db:5432/mallard",
    "MALLARD_GITHUB_WEBHOOK_SECRET=abcdefabcdefabcdef",
])
def test_token_shaped_strings_are_redacted(leak: str) -> None:
    out = scrub(f"-- configuring\n{leak}\n-- done")
    assert REDACTED in out
    for secret in (API_TOKEN, "hunter2", "A1b2A1b2", "x1Y2_x1Y2", "a1B2c3a1B2c3",
                   "something-long", "abcdefabcdef"):
        assert secret not in out
    assert out.startswith("-- configuring\n") and out.endswith("\n-- done")


def test_known_values_are_redacted_whatever_their_shape() -> None:
    token = "plain-runner-token-0123456789"
    out = scrub(f"read {token} from the file; reversed {token[::-1]}", known=[token, None, ""])
    assert token not in out and out.startswith(f"read {REDACTED} from the file")


def test_short_known_values_do_not_blank_a_log() -> None:
    assert scrub("error: expected ';'", known=["e", "or"]) == "error: expected ';'"


def test_an_ordinary_build_log_is_unchanged() -> None:
    log = ("$ cmake -S allocator -B build -G Ninja -DCMAKE_BUILD_TYPE=Release\n"
           "-- The C compiler identification is GNU 12.2.0\n"
           "toy.c:1:1: error: expected '=', ',', ';', 'asm' or '__attribute__' before 'is'\n"
           "    1 | this is not C;\n"
           "https://github.com/example/mallard.git at 0123456789abcdef\n"
           "max_tokens 5, token count 12, tokenizer.c: parse error\n")
    assert scrub(log) == log
