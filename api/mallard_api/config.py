"""Settings: the one pydantic-settings class, read from the environment.

`DATABASE_URL` has no prefix; every other variable is `MALLARD_<NAME>`. Secrets have
no defaults. Every variable is documented in the repository's `.env.example`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_REPO_ROOT = Path(__file__).resolve().parents[2]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MALLARD_", extra="ignore")

    # Storage. No DATABASE_URL: an embedded PostgreSQL in data_dir is started and used.
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("DATABASE_URL", "database_url")
    )
    data_dir: Path = Path(".mallard/pgdata")
    embedded_port: int = 0  # 0: pick a free port on 127.0.0.1
    migrate_on_start: bool = True
    migrations_dir: Path = _REPO_ROOT / "db"
    db_pool_size: int = 10

    # Jobs queued by a push.
    suite: str = "quick"
    trials: int = 5
    warmup: int = 1
    peers: str = "glibc,jemalloc,mimalloc,tcmalloc"
    default_arch: str = "x86_64"
    job_max_attempts: int = 3
    lease_seconds_max: int = 86400
    # Besides every claim, a periodic sweep re-queues jobs whose lease expired (0: off).
    sweep_seconds: float = 30

    # Webhook secrets (no defaults). A project's own `webhook_secret` takes precedence.
    github_webhook_secret: str | None = None
    gitlab_webhook_token: str | None = None
    gitea_webhook_secret: str | None = None

    # An admin token accepted without being in the database (for bootstrapping a
    # cluster before anyone can run the CLI). Unset: none.
    bootstrap_admin_token: str | None = None

    # Analysis (owned by the analysis modules: stats.py, changepoints.py, notify.py).
    # Verdict policy (stats.py docstring has the exact rule).
    stats_alpha: float = 0.05
    stats_min_effect_pct: float = 1.0
    stats_min_trials: int = 5
    stats_settle_trials: int = 10
    stats_settle_max_half_width_pct: float = 3.0
    stats_min_trials_deterministic: int = 1
    stats_deterministic_tolerance_pct: float = 0.1
    stats_deterministic_min_effect_pct: float = 0.25
    stats_deterministic_min_count: float = 20.0
    stats_target_mde_pct: float = 2.0
    stats_bootstrap_resamples: int = 5000
    comparison_max_follow_ups: int = 2
    # Change detection on branch history (changepoints.py).
    changepoint_max_pvalue: float = 0.001
    changepoint_min_magnitude_pct: float = 2.0
    changepoint_min_segment: int = 3
    # Alert webhooks: "generic:http://host/hook,slack:http://host/slack" (kind: optional,
    # generic by default); more can be stored in the webhook_endpoints table.
    alert_webhooks: str = ""
    outbox_poll_seconds: float = 2.0
    outbox_base_delay_seconds: float = 5.0
    outbox_max_delay_seconds: float = 3600.0
    outbox_max_attempts: int = 25
    webhook_timeout_seconds: float = 5.0

    # Web pages (mallard_api/ui). The address people reach the API at, e.g.
    # https://mallard.example.org: absolute links in reports, webhooks and dashboards are
    # built from it (unset: links are paths such as /ui/comparisons/3). A login session
    # lasts ui_session_hours; ui_session_secret (optional, shared by every replica) is
    # mixed into the session signature so that reading the api_tokens table is not
    # enough to forge a session cookie.
    public_url: str | None = None
    ui_session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    ui_session_secret: str | None = None

    @field_validator("public_url")
    @classmethod
    def _public_url(cls, v: str | None) -> str | None:
        if v is None or not v.strip():
            return None
        u = urlsplit(v.strip())
        if u.scheme not in ("http", "https") or not u.netloc or u.query or u.fragment:
            raise ValueError("MALLARD_PUBLIC_URL must be http(s)://host[:port][/path], "
                             "without query or fragment")
        return v.strip().rstrip("/")

    @property
    def peer_list(self) -> list[str]:
        return [p.strip() for p in self.peers.split(",") if p.strip()]


@lru_cache
def get_settings() -> Settings:
    return Settings()
