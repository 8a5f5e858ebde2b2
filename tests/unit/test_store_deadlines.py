"""The GCS backend's deadlines: per-request timeout, bounded retry with backoff (google-cloud-storage's own
Retry), conditional writes retried only with a precondition, the settings from the environment, and the
budget one webhook delivery or api answer gives all its store calls."""

from __future__ import annotations

import pytest
from google.cloud.storage.retry import ConditionalRetryPolicy

from tidecd.base.errors import ConfigError, TemporaryError
from tidecd.clients.deadlines import (
    STORE_RETRY_DEADLINE,
    STORE_TIMEOUT,
    Budget,
    Deadlines,
    budget,
    call_options,
    env_seconds,
)
from tidecd.clients.store import GcsStore, StoreUnavailable


def test_defaults_fit_a_function_budget() -> None:
    deadlines = Deadlines.from_env({})
    assert (deadlines.timeout, deadlines.retry_deadline) == (STORE_TIMEOUT, STORE_RETRY_DEADLINE) == (5.0, 10.0)


def test_settings_come_from_the_environment() -> None:
    deadlines = Deadlines.from_env({"TIDECD_STORE_TIMEOUT": "2.5", "TIDECD_STORE_RETRY_DEADLINE": " 7 "})
    assert (deadlines.timeout, deadlines.retry_deadline) == (2.5, 7.0)


@pytest.mark.parametrize("raw", ["soon", "0", "-1", "nan", "inf", "99999"])
def test_a_bad_setting_is_one_clear_error_naming_it(raw: str) -> None:
    with pytest.raises(ConfigError, match="TIDECD_STORE_TIMEOUT"):
        env_seconds("TIDECD_STORE_TIMEOUT", 5.0, {"TIDECD_STORE_TIMEOUT": raw})


def test_the_gcs_backend_reads_its_deadlines_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_STORE_TIMEOUT", "1.5")
    monkeypatch.setenv("TIDECD_STORE_RETRY_DEADLINE", "4")
    assert GcsStore("bucket").deadlines == Deadlines(1.5, 4.0)


def test_call_options_use_the_librarys_retry_with_our_deadline_and_backoff() -> None:
    options = call_options(Deadlines(3.0, 8.0))

    assert options.timeout == 3.0
    assert options.retry.timeout == 8.0  # google.api_core's overall deadline (`with_deadline`)
    described = str(options.retry)  # google.api_core shows its backoff only there
    assert "initial=0.1," in described and "maximum=2.0," in described and "multiplier=2.0," in described
    assert "_should_retry" in described  # google-cloud-storage's own predicate: 408, 429, 5xx, resets, timeouts


def test_writes_are_retried_only_with_a_generation_precondition() -> None:
    policy = call_options(Deadlines()).conditional_retry

    assert isinstance(policy, ConditionalRetryPolicy)
    assert policy.get_retry_policy_if_conditions_met(query_params={"ifGenerationMatch": 0}) is not None
    assert policy.get_retry_policy_if_conditions_met(query_params={"ifGenerationMatch": 17}) is not None
    assert policy.get_retry_policy_if_conditions_met(query_params={}) is None  # a single attempt


def test_a_budget_caps_the_timeout_and_the_retry_deadline() -> None:
    options = call_options(Deadlines(5.0, 10.0), left=0.4)
    assert options.timeout == 0.4 and options.retry.timeout == 0.4


def test_a_budget_is_charged_and_then_exhausted() -> None:
    spent = Budget(1.0, "the test's budget")
    spent.charge(0.7, failed=False)
    assert spent.left() == pytest.approx(0.3)
    spent.charge(0.5, failed=True)
    assert spent.left() < 0
    assert "the test's budget" in spent.exhausted()


def test_a_failed_only_budget_ignores_healthy_calls() -> None:
    spent = Budget(1.0, "api", failed_only=True)
    spent.charge(5.0, failed=False)
    assert spent.left() == 1.0
    spent.charge(1.0, failed=True)
    assert spent.left() == 0


def test_an_exhausted_budget_fails_a_gcs_call_at_once_without_the_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")  # nothing listens: must not be asked
    store = GcsStore("bucket", deadlines=Deadlines(5.0, 10.0))
    with budget(0.5, "the webhook's store budget") as spending:
        spending.charge(0.6, failed=True)
        with pytest.raises(StoreUnavailable, match="webhook's store budget") as raised:
            store.list("apps/")
    assert isinstance(raised.value, TemporaryError) and raised.value.delay == 0.5
