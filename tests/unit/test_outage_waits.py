"""An API server that goes away mid-operation is waited out, not failed (issue 29, Build 5).

The reconcile step on the fake cluster, one call at a time with a fake clock: while the cluster does not
answer, each step records a wait and asks for its next step after the retry policy's backoff, keeping the
operation's results; once the cluster answers the operation goes on from the wave it was in; with the
policy's retries spent it fails, saying how long, how many retries, whose limit and what was kept.
"""

from __future__ import annotations

import pytest

from tests.support.fakecluster import FakeCluster
from tests.unit.test_operation_steps import WAVE, Harness, configmap, deployment, h, key
from tidecd.base.errors import ClusterUnavailable
from tidecd.base.model import ResourceKey
from tidecd.clients.cluster import ApiError, unreachable
from tidecd.config.load import Backoff, Retry
from tidecd.state.app import OperationPhase, TaskPhase
from tidecd.sync import decide

__all__ = ["h"]  # the harness fixture, shared with test_operation_steps


def three_waves(harness: Harness) -> None:
    harness.git.push([configmap("first", **{WAVE: "0"}), deployment("web", **{WAVE: "1"}),
                      configmap("last", **{WAVE: "2"})])


def test_the_outage_classes_are_the_ones_a_wait_can_help() -> None:
    assert unreachable(ClusterUnavailable("API server x unreachable: ConnectionRefusedError"))
    for status in (429, 500, 503, 504):
        assert unreachable(ApiError(None, status, "", "x"))
    for status in (400, 401, 403, 404, 409, 422):
        assert not unreachable(ApiError(None, status, "", "x"))


def test_an_outage_in_a_waves_health_wait_is_waited_out_and_the_waves_go_on_in_order(h: Harness) -> None:
    h.configure(retry=Retry(limit=4, backoff=Backoff(duration_seconds=2, factor=2, max_duration_seconds=5)))
    three_waves(h)
    h.sync()
    h.step()
    assert h.op().step.startswith("waiting for healthy state of apps/Deployment/ns/web")
    assert h.cluster.created("ConfigMap") == ["first"]

    h.cluster.away = True
    delays = []
    for _ in range(3):
        outcome = h.step()
        op = h.op()
        assert op.phase is OperationPhase.RUNNING, op.message
        delays.append(outcome.continue_after)
        h.clock.advance(outcome.continue_after or 0)
    assert delays == [2.0, 4.0, 5.0]  # the policy's backoff: 2 s doubling, at most 5 s
    op = h.op()
    assert op.retry.count == 3 and op.retry.outage_since > 0
    assert "unreachable" in op.message and "retrying attempt #3 of 4" in op.message
    assert op.step.startswith("waiting for the API server to answer")
    # the progress is kept: wave 0 done, wave 1 applied and waited for
    assert {r.key.name: r.phase for r in op.results} == {"first": TaskPhase.SUCCEEDED, "web": TaskPhase.RUNNING}

    h.cluster.away = False
    h.step()  # answers again: still waiting for wave 1's health
    op = h.op()
    assert op.running and op.retry.outage_since == 0 and op.message == ""
    assert h.cluster.created("ConfigMap") == ["first"]
    h.cluster.ready(key("Deployment", "web"))
    h.until_done()
    op = h.op()
    assert op.phase is OperationPhase.SUCCEEDED, op.message
    assert h.cluster.created("ConfigMap") == ["first", "last"] and h.cluster.created("Deployment") == ["web"]


def test_an_apply_that_meets_the_outage_is_applied_again_once_the_cluster_answers(h: Harness) -> None:
    three_waves(h)
    h.sync()
    h.step()

    def gone_at_last(verb: str, k: ResourceKey) -> None:
        if verb == "apply" and k.name == "last":
            h.cluster.away = True
            raise ClusterUnavailable("API server https://fake:6443 unreachable: RemoteDisconnected")

    h.cluster.before_call = gone_at_last
    h.cluster.ready(key("Deployment", "web"))
    outcome = h.step()
    assert h.op().running and outcome.continue_after == 5.0  # no retry policy: Argo CD's default backoff
    h.cluster.before_call, h.cluster.away = None, False
    h.clock.advance(5)
    h.until_done()
    assert h.op().phase is OperationPhase.SUCCEEDED
    assert ResourceKey("", "ConfigMap", "ns", "last") in h.cluster.objects


@pytest.mark.parametrize("automated", [False, True])
def test_with_its_retries_spent_the_operation_fails_saying_what_happened(h: Harness, automated: bool) -> None:
    h.configure(automated=automated, retry=Retry(limit=2, backoff=Backoff(duration_seconds=1)))
    h.git.push([configmap("old")])
    h.step() if automated else (h.sync(), h.step())
    assert h.op().phase is OperationPhase.SUCCEEDED
    three_waves(h)
    if not automated:
        h.sync()
    h.step()
    assert h.op().step.startswith("waiting for healthy state")
    first_id = h.op().id

    h.cluster.away = True
    assert h.step().continue_after == 1.0
    h.clock.advance(1)
    assert h.step().continue_after == 2.0
    h.clock.advance(2)
    outcome = h.step()
    op = h.op()
    assert op.id == first_id and op.phase is OperationPhase.FAILED
    assert outcome.continue_after is None  # no retry: the policy's retries are spent
    assert "did not answer for 3 s" in op.message and "gave up after 2 retries" in op.message
    assert "syncPolicy.retry.limit is 2" in op.message
    assert "Sync wave 0, Sync wave 1" in op.message and "nothing was pruned" in op.message
    assert "will retry" not in op.message
    assert ResourceKey("", "ConfigMap", "ns", "old") in h.cluster.objects
    h.cluster.away = False
    h.clock.advance(100)
    h.step()
    assert h.op().id == first_id  # an automated sync does not start it again either: retries exhausted


def test_without_a_retry_policy_an_outage_is_waited_out_with_the_default(h: Harness) -> None:
    three_waves(h)
    h.sync()
    h.step()
    h.cluster.away = True
    delays = []
    while h.op().running:
        outcome = h.step()
        if h.op().running:
            delays.append(outcome.continue_after)
            h.clock.advance(outcome.continue_after or 0)
    assert delays == [5.0, 10.0, 20.0, 40.0, 80.0]
    assert len(delays) == decide.DEFAULT_OUTAGE_RETRIES
    assert "tidecd's default: the app sets no syncPolicy.retry" in h.op().message


def test_an_outage_before_the_first_write_waits_too(h: Harness) -> None:
    h.git.push([configmap("a")])
    h.sync()
    h.cluster.away = True
    assert h.step().continue_after == 5.0 and h.op().running and not h.op().progress.checked
    h.cluster.away = False
    h.clock.advance(5)
    h.until_done()
    assert h.op().phase is OperationPhase.SUCCEEDED and h.op().retry.count == 1


def test_a_fake_cluster_away_answers_nothing() -> None:
    cluster = FakeCluster()
    cluster.away = True
    with pytest.raises(ClusterUnavailable):
        cluster.list("", "ConfigMap")


def test_a_trigger_before_the_attempt_is_due_spends_no_retry(h: Harness) -> None:
    """A refresh, a webhook or the poll may run a step during the backoff: it meets the outage again, but
    only the due attempt counts (as Argo CD's "Retrying attempt #N at T")."""
    three_waves(h)
    h.sync()
    h.step()
    h.cluster.away = True
    assert h.step().continue_after == 5.0 and h.op().retry.count == 1
    h.clock.advance(2)
    assert h.step().continue_after == pytest.approx(3.0) and h.op().retry.count == 1
    h.clock.advance(3)
    assert h.step().continue_after == 10.0 and h.op().retry.count == 2


def test_an_unreachable_api_server_says_why_in_a_few_words() -> None:
    import urllib3

    from tidecd.clients import cluster

    socket_error = urllib3.exceptions.NewConnectionError(
        None, "Failed to establish a new connection: [Errno 111] Connection refused")  # type: ignore[arg-type]
    refused = urllib3.exceptions.MaxRetryError(None, "/api", socket_error)  # type: ignore[arg-type]
    timeout = urllib3.exceptions.ReadTimeoutError(None, "/api", "Read timed out. (read timeout=60)")  # type: ignore[arg-type]
    for exc, reason in ((refused, "connection refused"), (timeout, "timed out"),
                        (ConnectionResetError(104, "Connection reset by peer"), "connection reset")):
        found = cluster._transport_error("https://k:6443", None, exc, None)
        assert isinstance(found, ClusterUnavailable)
        assert str(found) == f"API server https://k:6443 unreachable: {reason}"
