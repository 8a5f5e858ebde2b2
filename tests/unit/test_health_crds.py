"""Built-in health of custom resources: Argo Rollouts, Argo CD Applications, SealedSecrets, cert-manager
Certificates, the kstatus fallback, and the order Lua → built-in → kstatus."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tidecd.base.model import HealthResult, HealthStatus, ResourceKey
from tidecd.health import app_health, assess, catalogue, has_check, hook_outcome

H, S, P, M, D, U = (HealthStatus.HEALTHY, HealthStatus.SUSPENDED, HealthStatus.PROGRESSING,
                    HealthStatus.MISSING, HealthStatus.DEGRADED, HealthStatus.UNKNOWN)


def obj(api: str, kind: str, *, generation: int = 1, spec: dict[str, Any] | None = None,
        status: dict[str, Any] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"apiVersion": api, "kind": kind,
                           "metadata": {"name": "x", "namespace": "ns", "generation": generation}}
    if annotations:
        out["metadata"]["annotations"] = annotations
    if spec is not None:
        out["spec"] = spec
    if status is not None:
        out["status"] = status
    return out


def rollout(status: dict[str, Any] | None, *, strategy: str = "canary", **spec: Any) -> dict[str, Any]:
    return obj("argoproj.io/v1alpha1", "Rollout", generation=2,
               spec={"replicas": 2, "strategy": {strategy: {}}, **spec}, status=status)


STEADY = {"observedGeneration": "2", "currentPodHash": "abc", "stableRS": "abc", "replicas": 2,
          "updatedReplicas": 2, "availableReplicas": 2, "blueGreen": {"activeSelector": "abc"}}
ROLLOUTS = [
    ("no controller: no status", rollout(None), P, "Waiting for rollout spec update to be observed"),
    ("stale generation", rollout({**STEADY, "observedGeneration": 1}), P,
     "Waiting for rollout spec update to be observed"),
    ("phase reported", rollout({**STEADY, "phase": "Degraded", "message": "InvalidSpec"}), D, "InvalidSpec"),
    ("phase Paused", rollout({**STEADY, "phase": "Paused", "message": "CanaryPauseStep"}), S, "CanaryPauseStep"),
    ("aborted", rollout({**STEADY, "conditions": [{"type": "Progressing", "reason": "RolloutAborted",
                                                    "message": "Rollout is aborted"}]}), D, "Rollout is aborted"),
    ("deadline", rollout({**STEADY, "conditions": [{"type": "Progressing", "reason": "ProgressDeadlineExceeded",
                                                     "message": "timed out"}]}), D, "timed out"),
    ("paused by the user", rollout(STEADY, paused=True), S, "Rollout is paused"),
    ("pause condition", rollout({**STEADY, "pauseConditions": [{"reason": "CanaryPauseStep"}]}), S,
     "Rollout is paused"),
    ("not reconciled", rollout({"observedGeneration": 2}), P,
     "Waiting for rollout to finish: status has not been reconciled."),
    ("updating", rollout({**STEADY, "updatedReplicas": 1}), P,
     "Waiting for roll out to finish: More replicas need to be updated"),
    ("becoming available", rollout({**STEADY, "availableReplicas": 1}), P,
     "Waiting for roll out to finish: updated replicas are still becoming available"),
    ("old replicas", rollout({**STEADY, "replicas": 3}), P,
     "Waiting for roll out to finish: old replicas are pending termination"),
    ("steps left", rollout({**STEADY, "stableRS": "old"}), P, "Waiting for rollout to finish steps"),
    ("canary done", rollout(STEADY), H, ""),
    ("blue-green cut-over", rollout({**STEADY, "blueGreen": {"activeSelector": "old"}}, strategy="blueGreen"), P,
     "active service cutover pending"),
    ("blue-green done", rollout(STEADY, strategy="blueGreen"), H, ""),
    ("workload generation", rollout(STEADY, workloadRef={"kind": "Deployment", "name": "web"}) | {
        "metadata": {"name": "x", "generation": 2, "annotations": {"rollout.argoproj.io/workload-generation": "4"}}},
     P, "Waiting for rollout spec update to be observed"),
]


@pytest.mark.parametrize(("case", "live", "status", "message"), ROLLOUTS, ids=[r[0] for r in ROLLOUTS])
def test_rollout(case: str, live: dict[str, Any], status: HealthStatus, message: str,
                 monkeypatch: pytest.MonkeyPatch) -> None:
    """tidecd's own Rollout check, which applies where Argo CD's catalogue is not installed (its health.lua
    comes first where it is, and agrees on Argo CD's fixtures: tests/e2e/test_health_catalogue.py)."""
    monkeypatch.setattr(catalogue, "root", lambda: None)
    assert assess(live) == HealthResult(status, message)


def app(health: str | None, *, sync: str = "Synced", phase: str = "", message: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"sync": {"status": sync}}
    if health is not None:
        status["health"] = {"status": health, **({"message": message} if message else {})}
    if phase:
        status["operationState"] = {"phase": phase}
    return obj("argoproj.io/v1alpha1", "Application", status=status)


@pytest.mark.parametrize(("live", "expected"), [
    (obj("argoproj.io/v1alpha1", "Application"), HealthResult(P)),
    (app("Healthy"), HealthResult(H)),
    (app("Degraded", message="Deployment web failed"), HealthResult(D, "Deployment web failed")),
    (app("Healthy", phase="Running"), HealthResult(P, "sync operation is running")),
    (app("Healthy", sync="OutOfSync"), HealthResult(P, "sync status is OutOfSync")),  # waves wait on Synced too
    (app("Suspended"), HealthResult(S)),
    (app("Fine"), HealthResult(U, "Application reports an unknown health 'Fine'")),
], ids=["no-status", "healthy", "degraded", "operation-running", "out-of-sync", "suspended", "bad-health"])
def test_application(live: dict[str, Any], expected: HealthResult) -> None:
    assert assess(live) == expected


def sealed(generation: int, observed: int | None, synced: str | None, message: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {}
    if observed is not None:
        status["observedGeneration"] = observed
    if synced is not None:
        status["conditions"] = [{"type": "Synced", "status": synced, "message": message}]
    return obj("bitnami.com/v1alpha1", "SealedSecret", generation=generation, status=status)


WAIT_SEALED = "Waiting for Sealed Secret to be decrypted"


@pytest.mark.parametrize(("live", "expected"), [
    (sealed(1, 1, "True"), HealthResult(H)),
    (sealed(1, 1, "False", "no key could decrypt secret (password)"),
     HealthResult(D, "no key could decrypt secret (password)")),
    (sealed(2, 1, "True"), HealthResult(P, WAIT_SEALED)),  # describes the previous generation
    (sealed(1, None, "True"), HealthResult(P, WAIT_SEALED)),
    (sealed(1, 1, None), HealthResult(P, WAIT_SEALED)),
], ids=["synced", "failed", "stale", "no-observed-generation", "no-condition"])
def test_sealed_secret(live: dict[str, Any], expected: HealthResult) -> None:
    assert assess(live) == expected


def certificate(*conditions: tuple[str, str, str]) -> dict[str, Any]:
    return obj("cert-manager.io/v1", "Certificate",
               status={"conditions": [{"type": t, "status": s, "message": m} for t, s, m in conditions]})


@pytest.mark.parametrize(("live", "expected"), [
    (obj("cert-manager.io/v1", "Certificate"), HealthResult(P, "Waiting for certificate")),
    (certificate(("Ready", "True", "Certificate is up to date")), HealthResult(H, "Certificate is up to date")),
    (certificate(("Ready", "False", "Issuer not found")), HealthResult(D, "Issuer not found")),
    (certificate(("Ready", "True", "ok"), ("Issuing", "True", "Renewing certificate as renewal was scheduled")),
     HealthResult(P, "Renewing certificate as renewal was scheduled")),
], ids=["no-status", "ready", "not-ready", "issuing-wins"])
def test_certificate(live: dict[str, Any], expected: HealthResult) -> None:
    assert assess(live) == expected


def widget(generation: int = 1, observed: int | None = 1, **conditions: str) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [{"type": t, "status": s, "reason": f"{t}Reason", "message": ""}
                                             for t, s in conditions.items()]}
    if observed is not None:
        status["observedGeneration"] = observed
    return obj("example.com/v1", "Widget", generation=generation, status=status)


@pytest.mark.parametrize(("live", "expected"), [
    (widget(3, 2, Ready="True"), HealthResult(P, "Widget generation is 3, but latest observed generation is 2")),
    (widget(Stalled="True", Ready="False"), HealthResult(D, "Stalled: StalledReason")),
    (widget(Reconciling="True", Ready="False"), HealthResult(P, "Reconciling: ReconcilingReason")),
    (widget(Ready="True"), HealthResult(H, "ReadyReason")),
    (widget(Ready="False"), HealthResult(D, "Ready: ReadyReason")),
    (widget(Ready="Unknown"), HealthResult(P, "Ready: ReadyReason")),
    (widget(observed=None, Ready="True"), HealthResult(H, "ReadyReason")),
], ids=["stale-generation", "stalled", "reconciling", "ready", "not-ready", "ready-unknown", "no-observed"])
def test_kstatus_fallback(live: dict[str, Any], expected: HealthResult) -> None:
    assert assess(live) == expected


def test_kstatus_says_nothing_without_its_signals() -> None:
    """A custom resource without kstatus conditions has no health, as in Argo CD; Kubernetes' own kinds
    never get the fallback (a Node's Ready is not an app's health)."""
    assert assess(widget(Accepted="True")) is None
    assert assess(obj("example.com/v1", "Widget")) is None
    node = obj("v1", "Node", status={"conditions": [{"type": "Ready", "status": "False"}]})
    assert assess(node) is None


def test_kstatus_message_is_the_conditions_message() -> None:
    live = widget(Ready="False")
    live["status"]["conditions"][0]["message"] = "dependency db not ready"
    assert assess(live) == HealthResult(D, "dependency db not ready")


LUA_HEALTHY = 'return {status = "Healthy", message = "from Lua " .. obj.metadata.name}'


def test_lua_takes_precedence_over_built_in_and_kstatus() -> None:
    scripts = {"argoproj.io/Rollout": LUA_HEALTHY, "example.com/Widget": LUA_HEALTHY}
    assert assess(rollout(None), scripts) == HealthResult(H, "from Lua x")
    assert assess(widget(Stalled="True"), scripts) == HealthResult(H, "from Lua x")
    assert assess(rollout(None), {"other.io/Thing": LUA_HEALTHY}) == HealthResult(
        P, "Waiting for rollout spec update to be observed")


def test_lua_keys_core_kinds_and_globs() -> None:
    cm = obj("v1", "ConfigMap")
    assert assess(cm, {"ConfigMap": LUA_HEALTHY}) == HealthResult(H, "from Lua x")
    assert assess(cm, {"/ConfigMap": LUA_HEALTHY}) == HealthResult(H, "from Lua x")
    assert assess(widget(), {"*.com/*": LUA_HEALTHY}) == HealthResult(H, "from Lua x")
    assert assess(widget(), {"example.com/Widget": 'return {status = "Degraded"}', "*.com/*": LUA_HEALTHY}) \
        == HealthResult(D, "")


def test_lua_returning_nil_means_no_health() -> None:
    assert assess(rollout(None), {"argoproj.io/Rollout": "return nil"}) is None


def test_has_check_and_missing_resources() -> None:
    """Which kinds have a check; an app none of whose resources is live is Missing, whatever their kinds
    (Argo CD 3's setApplicationHealth)."""
    assert has_check("argoproj.io", "Rollout")
    assert not has_check("example.com", "Widget")
    assert has_check("example.com", "Widget", {"example.com/Widget": LUA_HEALTHY})
    widget_key = ResourceKey("example.com", "Widget", "ns", "x")
    rollout_key = ResourceKey("argoproj.io", "Rollout", "ns", "x")
    assert app_health([(widget_key, None, assess(None))]) is M
    assert app_health([(rollout_key, None, assess(None))]) is M


def test_a_broken_script_names_the_kind_and_fails_a_hook() -> None:
    result = assess(widget(), {"example.com/Widget": "return {status = "})
    assert result is not None and result.status is U
    assert result.message.startswith("health check for example.com/Widget "
                                     "(argocd-cm resource.customizations.health.example.com_Widget): Lua error:")
    outcome = hook_outcome(widget(), {"example.com/Widget": "error('nope')"})
    assert not outcome.succeeded and outcome.finished and "nope" in outcome.message


# --- Argo CD's Lua catalogue, bundled and applied by default (tidecd.health.catalogue) ----------------------

SUSPENDED_CRONJOB = obj("batch/v1", "CronJob", spec={"schedule": "* * * * *", "suspend": True},
                        status={"lastScheduleTime": "2026-01-01T00:00:00Z"})


def test_the_catalogue_comes_before_the_built_in_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """As Argo CD: its catalogue's batch/CronJob/health.lua (a suspended CronJob is Healthy there), not
    tidecd's own check (Suspended), which applies only where the catalogue is not installed."""
    assert catalogue.health_script("batch", "CronJob") is not None
    assert assess(SUSPENDED_CRONJOB) == HealthResult(H, "CronJob is Suspended")
    with monkeypatch.context() as without:
        without.setattr(catalogue, "root", lambda: None)
        result = assess(SUSPENDED_CRONJOB)
        assert result is not None and result.status is S


def test_an_argocd_cm_script_wins_over_the_catalogue() -> None:
    mine = 'return {status = "Degraded", message = "ours"}'
    assert assess(SUSPENDED_CRONJOB, {"batch/CronJob": mine}) == HealthResult(D, "ours")
    assert assess(SUSPENDED_CRONJOB, {"batch/*": mine}) == HealthResult(D, "ours")  # a glob key too
    provider = obj("pkg.crossplane.io/v1", "Provider", status={"conditions": []})
    assert catalogue.health_script("pkg.crossplane.io", "Provider") is not None
    assert assess(provider, {"*.crossplane.io/*": mine}) == HealthResult(D, "ours")


def test_the_catalogue_picks_a_kinds_own_script_then_a_wildcard_one() -> None:
    own = catalogue.health_script("pkg.crossplane.io", "Provider")
    wildcard = catalogue.health_script("example.crossplane.io", "Bucket")
    assert own is not None and own[0] == "pkg.crossplane.io/Provider"
    assert wildcard is not None and wildcard[0] == "_.crossplane.io/_"
    assert catalogue.health_script("crossplane.io", "Bucket") is None  # `_.` needs a subdomain
    assert catalogue.health_script("", "ConfigMap") is None
    assert catalogue.pick(("_.example.com/_", "a.example.com/Widget"), "a.example.com", "Widget") == \
        "a.example.com/Widget"
    assert catalogue.pick(("_.example.com/_",), "a.b.example.com", "Widget") == "_.example.com/_"
    assert catalogue.pick(("_.example.com/_",), "example.com", "Widget") is None


def test_a_kind_only_the_catalogue_checks_has_a_check() -> None:
    """Argo CD's catalogue checks a PodDisruptionBudget."""
    assert has_check("policy", "PodDisruptionBudget")


def test_a_broken_catalogue_script_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "example.com" / "Widget").mkdir(parents=True)
    (tmp_path / "example.com" / "Widget" / "health.lua").write_text("return {status = ")
    monkeypatch.setattr(catalogue, "root", lambda: tmp_path)
    result = assess(widget())
    assert result is not None and result.status is U
    assert "(Argo CD's catalogue example.com/Widget/health.lua): Lua error:" in result.message


def test_without_the_catalogue_the_built_in_checks_apply_and_it_is_said_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDECD_BIN_DIR", str(tmp_path / "bin"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    catalogue.forget()
    try:
        with capture_logs() as logs:
            first, again = assess(SUSPENDED_CRONJOB), assess(SUSPENDED_CRONJOB)
        assert first == again and first is not None and first.status is S  # tidecd's own CronJob check
        said = [e for e in logs if "Lua catalogue not found" in e["event"]]
        assert len(said) == 1 and said[0]["log_level"] == "warning", logs
        assert str(tmp_path / "cache" / "tidecd" / "bin" / "argocd-catalogue") in said[0]["looked_in"]
        assert "make tools" in said[0]["fix"]
    finally:
        catalogue.forget()  # found again, where it is, by the next test
