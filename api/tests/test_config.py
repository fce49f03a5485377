"""Settings refuse placeholder and short secrets, unknown peers and bad allow-lists at
start, with a message naming the variable."""

from __future__ import annotations

import pytest
from mallard_api.config import Settings
from pydantic import ValidationError

SECRETS = ["bootstrap_admin_token", "github_webhook_secret", "gitlab_webhook_token",
           "gitea_webhook_secret"]


@pytest.mark.parametrize("field", SECRETS)
@pytest.mark.parametrize("value,why", [("CHANGE-ME", "placeholder"),
                                       ("change_me_please_0123456789", "placeholder"),
                                       ("short", "shorter than 16 bytes")])
def test_placeholder_and_short_secrets_are_refused(field, value, why):
    with pytest.raises(ValidationError) as exc:
        Settings(**{field: value})
    assert why in str(exc.value) and f"MALLARD_{field.upper()}" in str(exc.value)


@pytest.mark.parametrize("field", SECRETS)
def test_real_or_unset_secrets_are_fine(field):
    assert getattr(Settings(**{field: "k3J9-xw2Q_hT7mPz4vLc"}), field) == "k3J9-xw2Q_hT7mPz4vLc"
    assert getattr(Settings(**{field: ""}), field) is None


def test_the_environment_is_read(monkeypatch):
    monkeypatch.setenv("MALLARD_GITHUB_WEBHOOK_SECRET", "CHANGE-ME")
    with pytest.raises(ValidationError, match="MALLARD_GITHUB_WEBHOOK_SECRET is a placeholder"):
        Settings()


def test_unknown_peer_and_bad_allow_list():
    with pytest.raises(ValidationError, match="'/tmp/evil.so' is not an allocator name"):
        Settings(peers="glibc,/tmp/evil.so")
    assert Settings(peers="glibc,my-alloc_2").peer_list == ["glibc", "my-alloc_2"]
    with pytest.raises(ValidationError, match="MALLARD_REPO_URL_ALLOW entry"):
        Settings(repo_url_allow="github.com")


def test_the_body_buffer_holds_the_largest_body_read_before_admission():
    with pytest.raises(ValidationError) as exc:
        Settings(body_buffer_bytes=2 << 20, max_webhook_body_bytes=4 << 20)
    assert "MALLARD_BODY_BUFFER_BYTES" in str(exc.value)
    assert Settings(body_buffer_bytes=4 << 20, max_webhook_body_bytes=4 << 20)
    with pytest.raises(ValidationError):
        Settings(max_header_bytes=100)  # below 1 KiB: no request would fit
