"""Settings: the one pydantic-settings class, read from the environment.

`DATABASE_URL` has no prefix; every other variable is `MALLARD_<NAME>`. Secrets have
no defaults. Every variable is documented in the repository's `.env.example`.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from mallard_wire.fields import ALLOCATOR_NAME
from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mallard_api.urls import parse_allow_list

_REPO_ROOT = Path(__file__).resolve().parents[2]
SECRET_MIN_BYTES = 16
# "CHANGE-ME", "changeme", "change_me", "<change me>" ... as copied from an example file.
_PLACEHOLDER = re.compile(r"change[-_ ]?me|replace[-_ ]?me|^x+$|^\.+$|example|placeholder",
                          re.IGNORECASE)


def check_secret(name: str, value: str | None) -> str | None:
    """A secret is unset (None, or empty: treated as unset) or a real one: at least
    SECRET_MIN_BYTES bytes and not a placeholder from an example file. The message
    never holds the value."""
    if value is None or value == "":
        return None
    if _PLACEHOLDER.search(value):
        raise ValueError(f"{name} is a placeholder copied from a sample file: set a real "
                         "secret, e.g. "
                         "`python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`")
    if len(value.encode()) < SECRET_MIN_BYTES:
        raise ValueError(f"{name} is shorter than {SECRET_MIN_BYTES} bytes: set a longer "
                         "secret")
    return value


class Settings(BaseSettings):
    # a refused value is never repeated in the error (it may be a secret)
    model_config = SettingsConfigDict(env_prefix="MALLARD_", extra="ignore",
                                      hide_input_in_errors=True)

    # Storage. No DATABASE_URL: an embedded PostgreSQL in data_dir is started and used.
    database_url: str | None = Field(
        default=None, validation_alias=AliasChoices("DATABASE_URL", "database_url")
    )
    data_dir: Path = Path(".mallard/pgdata")
    embedded_port: int = 0  # 0: pick a free port on 127.0.0.1
    migrate_on_start: bool = True
    migrations_dir: Path = _REPO_ROOT / "db"
    # Connections for requests. The request thread pool is sized to the same number, so
    # a request never waits for a connection while holding a thread (api/README.md).
    db_pool_size: int = Field(default=20, ge=1, le=500)
    db_pool_timeout_seconds: float = Field(default=10.0, gt=0)
    db_connect_timeout_seconds: int = Field(default=5, ge=1)
    # A database outage is answered 503 with this Retry-After.
    retry_after_seconds: int = Field(default=5, ge=1)

    # What a job may ask for. Suites are the runner's suite files (<name>.yaml, read once at
    # start): a job's suite must be one of their names and its workloads in that suite.
    suites_dir: Path = _REPO_ROOT / "runner" / "suites"
    # Where a project's or job's repo_url may point: comma-separated `scheme://host[:port]
    # [/path]` prefixes (https, http, ssh, git, file). A local path is file://. Empty: none.
    repo_url_allow: str = ""

    # Request bounds (bytes), checked before the body is read; larger bodies get 413.
    max_body_bytes: int = Field(default=1 << 20, ge=1024)
    max_results_body_bytes: int = Field(default=32 << 20, ge=1024)
    max_webhook_body_bytes: int = Field(default=4 << 20, ge=1024)
    max_artifacts_bytes: int = Field(default=8 << 20, ge=0)
    # Slow clients (limits.py, server.py; api/README.md "Slow clients"): a request's line
    # and headers are at most max_header_bytes (431) and arrive within
    # header_timeout_seconds (else the connection is closed); its body has arrived, at
    # every moment, at (seconds since its headers - body_grace_seconds) x
    # body_min_bytes_per_second bytes (else 408); bodies read before a request is let in
    # hold at most body_buffer_bytes in all (else 503); an answer the client does not read
    # for send_timeout_seconds ends its connection; idle connections are kept
    # keep_alive_seconds (longer than clients keep theirs, httpx: 5 s).
    max_header_bytes: int = Field(default=32 << 10, ge=1024, le=1 << 20)
    header_timeout_seconds: float = Field(default=10.0, gt=0)
    body_grace_seconds: float = Field(default=10.0, gt=0)
    body_min_bytes_per_second: int = Field(default=16 << 10, ge=1)
    body_buffer_bytes: int = Field(default=64 << 20, ge=1 << 20)
    send_timeout_seconds: float = Field(default=30.0, gt=0)
    keep_alive_seconds: int = Field(default=75, ge=1)
    # A results post: its JSON values (commas outside strings, checked before it is
    # parsed: what bounds its memory, rawbody.json_values), its trials (the wire's own
    # bound is 20,000), the measure names it may add, and the names a project's posts may
    # add in all (sql/measures.py); past them, 413 / 422 naming `body` or `trials`.
    max_results_body_values: int = Field(default=2_000_000, ge=1000)
    max_trials_per_post: int = Field(default=10_000, ge=1, le=20_000)
    max_new_measures_per_post: int = Field(default=100, ge=0)
    max_measures_per_project: int = Field(default=1_000, ge=0)
    # Commits of one push that get commit jobs (the newest ones); all are recorded.
    push_max_queued: int = Field(default=20, ge=0)
    # Commits beyond that cap get theirs when a runner of the arch finds nothing queued.
    push_backfill: bool = True
    # A runner seen within this long counts as live: commits are judged on its arch.
    runner_live_seconds: float = Field(default=900.0, gt=0)
    # Bisection (bisections.py): start one when a verdict regresses over >1 commit; the
    # measures it follows first among the regressed cells; the longest range it walks.
    bisect_auto: bool = True
    # Follow-up rounds of a commit verdict's comparison (0: it settles on its first job,
    # an `unknown` stays unknown; the branch's next commit is the next evidence).
    verdict_max_follow_ups: int = Field(default=0, ge=0, le=5)
    bisect_measures: str = "instructions,llc_misses,ops_per_sec,max_rss_bytes"
    bisect_max_commits: int = Field(default=10_000, ge=2)
    # Differential profiles (analysis/profiles.py): a `profile` job per moved case of a
    # settled comparison (at most this many cases; 0: only those asked for over REST).
    profile_max_cases: int = Field(default=4, ge=0, le=20)
    # Where a project's forge (commit statuses) may be: `scheme://host[:port][/path]`
    # prefixes, comma-separated, as MALLARD_REPO_URL_ALLOW. Empty: no forge may be set.
    forge_url_allow: str = ""
    # Forge delivery ids are kept this long to refuse replays (besides the head rule).
    webhook_delivery_keep_days: int = Field(default=30, ge=1)

    # Jobs queued by a push.
    suite: str = "quick"
    trials: int = 5
    warmup: int = 1
    # the peers of a project with none of its own (catalogue names: glibc, jemalloc...)
    peers: str = "glibc,jemalloc,mimalloc,tcmalloc"
    default_arch: str = "x86_64"
    job_max_attempts: int = 3
    lease_seconds_max: int = 86400
    # Besides every claim, a periodic sweep re-queues jobs whose lease expired (0: off).
    sweep_seconds: float = 30
    # The analysis worker (comparisons, change detection) polls its queue this often
    # (and is woken by ingest in this process); 0: no worker in this process.
    analysis_poll_seconds: float = Field(default=1.0, ge=0)
    analysis_max_attempts: int = Field(default=5, ge=1)
    # The analysis worker applies every project's retention policy this often (0: never;
    # `mallard-api retention run` does it by hand).
    retention_interval_seconds: float = Field(default=86_400.0, ge=0)
    # Background loops back off up to this long while the database is unreachable.
    background_max_backoff_seconds: float = Field(default=30.0, gt=0)

    # Webhook secrets (no defaults). A project's own `webhook_secret` takes precedence.
    github_webhook_secret: str | None = None
    gitlab_webhook_token: str | None = None
    gitea_webhook_secret: str | None = None

    # An admin token accepted without being in the database (for bootstrapping a
    # cluster before anyone can run the CLI). Unset: none.
    bootstrap_admin_token: str | None = None
    # Tokens found are remembered this long per process (a revoked one keeps working at
    # most this long); 0: every request looks its token up.
    token_cache_seconds: float = Field(default=5.0, ge=0, le=300)
    # Per-token quotas on the work a user token has queued and not yet finished (jobs,
    # comparisons, and the trials its jobs ask for); past one, 429 with Retry-After.
    # Admin tokens are exempt; 0: no such quota (quotas.py).
    quota_queued_jobs: int = Field(default=400, ge=0)
    quota_queued_comparisons: int = Field(default=200, ge=0)
    quota_queued_trials: int = Field(default=250_000, ge=0)
    quota_retry_after_seconds: int = Field(default=60, ge=1)

    # Analysis (owned by the analysis modules: stats.py, changepoints.py, notify.py).
    # Verdict policy (stats.py docstring has the exact rule).
    stats_alpha: float = 0.05
    stats_min_effect_pct: float = 1.0
    stats_min_trials: int = 5
    stats_settle_trials: int = 10
    stats_settle_max_half_width_pct: float = 3.0
    stats_settle_max_mde_pct: float = 2.0
    stats_min_trials_deterministic: int = 2
    stats_deterministic_tolerance_pct: float = 0.1
    stats_deterministic_min_effect_pct: float = 0.25
    stats_deterministic_min_count: float = 20.0
    stats_target_mde_pct: float = 2.0
    stats_min_effect_bytes: float = Field(default=262144.0, ge=0)
    stats_bootstrap_resamples: int = 5000
    comparison_max_follow_ups: int = 5
    # Follow-ups are sized to reach stats_target_mde_pct on every unknown primary cell, and
    # stop early when every primary cell is settled or when the runner time their trials
    # would take (estimated from the trials' wall_seconds) would exceed this budget.
    comparison_follow_up_budget_seconds: float = Field(default=180.0, ge=0)
    # Calibrations (analysis/calibrations.py): a series' SAME band is its calibrated CV, at least
    # stats_min_effect_pct and at most this; comparisons a calibration may queue in all;
    # follow-ups of a calibration's comparisons (0: verdicts at the asked trials).
    calibration_band_max_pct: float = Field(default=10.0, gt=0, le=100)
    calibration_max_comparisons: int = Field(default=200, ge=1, le=5000)
    calibration_follow_ups: int = Field(default=0, ge=0, le=5)
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
    # Receivers delivered to at once (each in its own thread, so a slow one holds back
    # only its own events).
    outbox_concurrency: int = Field(default=8, ge=1, le=64)

    @field_validator("bootstrap_admin_token", "github_webhook_secret", "gitlab_webhook_token",
                     "gitea_webhook_secret")
    @classmethod
    def _real_secret(cls, value: str | None, info) -> str | None:  # type: ignore[no-untyped-def]
        return check_secret(f"MALLARD_{str(info.field_name).upper()}", value)

    @field_validator("peers")
    @classmethod
    def _peer_names(cls, value: str) -> str:
        bad = [p for p in _split(value) if not ALLOCATOR_NAME.match(p)]
        if bad:
            raise ValueError(f"MALLARD_PEERS: {', '.join(repr(p[:40]) for p in bad)} is not "
                             "an allocator name (letters, digits, '_', '.', '+', '-'): the "
                             "names of the runners' catalogue")
        return value

    @model_validator(mode="after")
    def _allow_list_parses(self) -> Settings:
        parse_allow_list(self.repo_url_allow)  # ValueError names the bad entry
        return self

    @model_validator(mode="after")
    def _buffer_holds_a_body(self) -> Settings:
        largest = max(self.max_body_bytes, self.max_webhook_body_bytes)
        if self.body_buffer_bytes < largest:
            raise ValueError(f"MALLARD_BODY_BUFFER_BYTES ({self.body_buffer_bytes}) must hold "
                             f"the largest body read before admission ({largest} bytes: "
                             "MALLARD_MAX_BODY_BYTES, MALLARD_MAX_WEBHOOK_BODY_BYTES)")
        return self

    # Web pages (mallard_api/ui). The address people reach the API at, e.g.
    # https://mallard.example.org: absolute links in reports, webhooks and dashboards are
    # built from it (unset: links are paths such as /ui/comparisons/3). A login session
    # lasts ui_session_hours; ui_session_secret (optional, shared by every replica) is
    # mixed into the session signature so that reading the api_tokens table is not
    # enough to forge a session cookie.
    public_url: str | None = None
    ui_session_hours: float = Field(default=12.0, gt=0, le=24 * 30)
    ui_session_secret: str | None = None

    def secret_values(self) -> tuple[str, ...]:
        """This API's own secrets, scrubbed from every log it stores (mallard_wire.scrub)."""
        return tuple(v for v in (self.bootstrap_admin_token, self.github_webhook_secret,
                                 self.gitlab_webhook_token, self.gitea_webhook_secret,
                                 self.ui_session_secret) if v)

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
        return _split(self.peers)


def _split(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


@lru_cache
def get_settings() -> Settings:
    return Settings()
