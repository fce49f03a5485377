"""How each forge delivers its webhooks: the header that authenticates a delivery, the
header that names the event, the events read, the delivery-id headers (replays).

* GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>`,
  `X-GitHub-Event: push | pull_request | issue_comment`, `X-GitHub-Delivery`.
* GitLab: `X-Gitlab-Token: <the webhook's secret token>` (compared as is),
  `X-Gitlab-Event: Push Hook | Merge Request Hook | Note Hook`, `X-Gitlab-Event-UUID`
  (or `Idempotency-Key`).
* Gitea and Forgejo: `X-Gitea-Signature: <hex HMAC-SHA256(secret, body)>`,
  `X-Gitea-Event: push | pull_request | issue_comment` (a comment on a pull request has
  `X-Gitea-Event-Type: pull_request_comment`; a new push to a pull request is `pull_request`
  too, with `X-Gitea-Event-Type: pull_request_sync`), `X-Gitea-Delivery`. Forgejo sends
  the same headers beside its own `X-Forgejo-*` ones.

The check runs over the raw bytes, before the body is parsed (routes/webhooks.py).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from mallard_api.config import Settings


@dataclass(frozen=True)
class Forge:
    name: str
    signature_header: str
    event_header: str
    push_events: tuple[str | None, ...]
    pull_request_event: str
    comment_event: str
    delivery_headers: tuple[str, ...]
    deployment_secret: Callable[[Settings], str | None]
    matches: Callable[[bytes, bytes, str], bool]  # (secret, raw body, header value)


def _hmac_hex(prefix: str) -> Callable[[bytes, bytes, str], bool]:
    def matches(secret: bytes, raw: bytes, given: str) -> bool:
        expected = prefix + hmac.new(secret, raw, hashlib.sha256).hexdigest()
        return hmac.compare_digest(expected.encode(), given.strip().encode())

    return matches


def _same_token(secret: bytes, raw: bytes, given: str) -> bool:
    return hmac.compare_digest(secret, given.encode())


GITHUB = Forge("github", "x-hub-signature-256", "x-github-event", (None, "push"),
               "pull_request", "issue_comment", ("x-github-delivery",),
               lambda s: s.github_webhook_secret, _hmac_hex("sha256="))
GITLAB = Forge("gitlab", "x-gitlab-token", "x-gitlab-event", (None, "Push Hook"),
               "Merge Request Hook", "Note Hook", ("x-gitlab-event-uuid", "idempotency-key"),
               lambda s: s.gitlab_webhook_token, _same_token)
GITEA = Forge("gitea", "x-gitea-signature", "x-gitea-event", (None, "push"),
              "pull_request", "issue_comment", ("x-gitea-delivery",),
              lambda s: s.gitea_webhook_secret, _hmac_hex(""))


def authentic(forge: Forge, secret: str | None, raw: bytes, given: str | None) -> bool:
    """Whether the header matches; with no secret, a throwaway one (same work, so the
    answer and its timing do not tell a missing secret or project from a wrong one)."""
    key = secret.encode() if secret else secrets.token_bytes(32)
    try:
        ok = forge.matches(key, raw, given or "")
    except (UnicodeError, TypeError):
        return False
    return ok and bool(secret) and bool(given)
