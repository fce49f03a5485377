"""The API's settings fill the statistics' policies; unset, they are the package's defaults
(the benches judge with `DEFAULT_POLICY`, so their verdicts are the API's)."""

from __future__ import annotations

import os

from mallard_api.analysis.policy import change_policy, stats_policy
from mallard_api.config import Settings
from mallard_stats.policy import DEFAULT_CHANGE_POLICY, DEFAULT_POLICY


def test_default_settings_give_the_default_policies(monkeypatch):
    for name in list(os.environ):
        if name.startswith(("MALLARD_STATS_", "MALLARD_CHANGEPOINT_")):
            monkeypatch.delenv(name)
    settings = Settings()
    assert stats_policy(settings) == DEFAULT_POLICY
    assert change_policy(settings) == DEFAULT_CHANGE_POLICY


def test_settings_reach_the_policies():
    settings = Settings(stats_min_effect_pct=2.5, stats_bootstrap_resamples=2000,
                        changepoint_min_magnitude_pct=5.0)
    assert stats_policy(settings).min_effect_pct == 2.5
    assert stats_policy(settings).n_resamples == 2000
    assert change_policy(settings).min_magnitude == 0.05
