"""Issue 29's acceptance: with the API server restarted for 30 s in the middle of a wave, the operation ends
Succeeded, with every wave in order, and no step longer than its budget. And the same with an API server that
hangs rather than goes away: paused (SIGSTOP) for 30 s, it keeps its port and the kernel still accepts
connections, but nothing answers; each API call of a step is given only what is left of the step's budget
(`clients.deadlines`), so every step still ends within its budget plus a small slack.

A control plane of its own (etcd, kube-apiserver, controller-manager, scheduler, kwok), so stopping its API
server for 30 s cannot disturb the session's other tests (kwok's node lease, the namespace collector). A
three-wave sync (ConfigMap, then a Deployment whose pod kwok makes Ready only after a few seconds, then a
ConfigMap) is started; once a step has recorded that it waits for wave 1's health, the API server is
stopped (or paused) in the middle of the next step's health poll, for 30 s, and started again on the same
port (or resumed, SIGCONT). Meanwhile the test plays the scheduler: it runs one step, sleeps for the step's
`continue_after`, runs the next, and times each one.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_continuations import slow
from tests.e2e.test_sync import available_since, ts
from tests.support.apps import GitOps, configmap, deployment
from tests.support.cluster import CONTROL_PLANE_TOOLS, ensure_tools
from tidecd.clients.deadlines import API_TIMEOUT_FLOOR
from tidecd.state.app import OperationPhase, TaskPhase
from tidecd.triggers.dispatch import reconcile_step
from tidecd.usecases.commands import SyncRequest, start_operation
from tidecd_dev.devcluster import READY_AFTER, DevCluster

pytestmark = pytest.mark.long_wait  # two 30 s outages and their backoff: handed out first (tests/conftest.py)
WAVE = "argocd.argoproj.io/sync-wave"
OUTAGE = 30.0  # seconds the API server is stopped
IN_STEP = 2.0  # seconds into a step (past its render and listing, in its health poll) the server stops
BUDGET = 10.0  # each step's budget (the reconcile default)
STEP_SLACK = 1.5  # a step's last health poll (0.5 s) and its one state save may end just past its budget
# A paused server holds each call up to its timeout: the step's last health read, made just before its
# deadline, is given the floor, then the step records the wait and saves.
PAUSED_SLACK = API_TIMEOUT_FLOOR + 1.0
# syncPolicy.retry: waits of 2, 4, 8, then 16 s (110 s in all) cover the outage, the restart and a margin.
RETRY = {"limit": 10, "backoff": {"duration": "2s", "factor": 2, "maxDuration": "16s"}}


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    ensure_tools(CONTROL_PLANE_TOOLS)
    dev = DevCluster(workdir=tmp_path_factory.mktemp("outage-cluster"), kwok=True)
    dev.start()
    try:
        yield dev
    finally:
        dev.stop()


@pytest.fixture()
def gitops(git_repo: Any, own_cluster: DevCluster, tmp_path: Path) -> GitOps:
    namespace = f"outage-{time.time_ns() % 10**8}"
    setup = GitOps(git_repo, namespace, own_cluster, tmp_path)
    setup.kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": namespace}})
    return setup


@dataclass(frozen=True)
class StepRun:
    started: float  # monotonic
    seconds: float
    continue_after: float | None
    line: str  # the operation's step line after it
    retries: int


class Outage:
    """Stops (or pauses) the API server in the middle of a step's health poll of wave 1, starts it again
    (or resumes it) after OUTAGE."""

    def __init__(self, gitops: GitOps, how: str) -> None:
        self.gitops, self.how = gitops, how
        self.paused = False
        self.stepping = threading.Event()  # set by the test's scheduler while a step runs
        self.stopped = self.restarting = self.started = 0.0  # monotonic: stopped, starting, answering again
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="outage", daemon=True)

    def _run(self) -> None:
        try:
            deadline = time.monotonic() + 120
            while "waiting for healthy state of apps/Deployment" not in self._line():
                if time.monotonic() > deadline:
                    raise AssertionError(f"wave 1's health wait never began: {self._line()!r}")
                time.sleep(0.05)
            # the next step, well inside its health poll (it renders and lists first)
            while self.stepping.is_set():
                time.sleep(0.01)
            if not self.stepping.wait(60):
                raise AssertionError("no step came after the one that began waiting")
            time.sleep(IN_STEP)
            if self.how == "paused":
                self.gitops.dev.pause_apiserver()
                self.paused = True
            else:
                self.gitops.dev.stop_apiserver()
            self.stopped = time.monotonic()
            time.sleep(OUTAGE)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.failure = exc
        finally:
            self.restarting = time.monotonic()
            if self.paused:
                self.gitops.dev.resume_apiserver()
                self.paused = False
            elif "kube-apiserver" not in self.gitops.dev.pids:
                self.gitops.dev.start_apiserver()
            self.started = time.monotonic()

    def _line(self) -> str:
        op = self.gitops.state().operation
        return op.step if op is not None else ""


@pytest.mark.parametrize("how", ["restarted", "paused"])
def test_an_api_server_away_for_30s_mid_wave_is_waited_out(gitops: GitOps, how: str) -> None:
    gitops.push({
        "app/first.yaml": configmap("first", annotations={WAVE: "0"}),
        "app/web.yaml": slow(deployment("web", annotations={WAVE: "1"}), **{READY_AFTER: "20s"}),
        "app/last.yaml": configmap("last", annotations={WAVE: "2"}),
    })
    app = gitops.application(retry=RETRY)
    runtime = gitops.runtime()
    start_operation(runtime, app, SyncRequest())
    outage = Outage(gitops, how)
    outage.thread.start()

    runs: list[StepRun] = []
    deadline = time.monotonic() + 300
    while True:
        begun = time.monotonic()
        outage.stepping.set()
        try:
            outcome = reconcile_step(runtime, app, automate=False, budget=BUDGET)
        finally:
            outage.stepping.clear()
        op = outcome.state.operation if outcome.state is not None else None
        assert op is not None
        runs.append(StepRun(begun, time.monotonic() - begun, outcome.continue_after, op.step, op.retry.count))
        if not op.running or outcome.continue_after is None:
            break
        assert time.monotonic() < deadline, f"still running after 300 s: {op.step}"
        time.sleep(outcome.continue_after)
    outage.thread.join(OUTAGE + 90)
    assert outage.failure is None, outage.failure

    print(f"\nAPI server {how}, away {outage.started - outage.stopped:.1f} s; {len(runs)} steps:", file=sys.stderr)
    for run in runs:
        print(f"  +{run.started - runs[0].started:5.1f} s  {run.seconds:5.2f} s  retries {run.retries}  "
              f"next in {run.continue_after}  {run.line}", file=sys.stderr)

    state = gitops.state()
    op = state.operation
    assert op is not None and op.phase is OperationPhase.SUCCEEDED, op.message if op else state
    assert outage.started - outage.stopped >= OUTAGE
    # the outage was met and waited out, within the retry policy, by steps that came as continuations
    during = [r for r in runs if outage.stopped <= r.started and r.started + r.seconds < outage.restarting]
    assert during and all("waiting for the API server" in r.line for r in during), during
    assert 1 <= op.retry.count <= RETRY["limit"]  # type: ignore[operator]
    assert not op.retry.outage_since
    # no step longer than its budget (a paused server holds the step's last read up to the floor)
    longest = max(r.seconds for r in runs)
    slack = PAUSED_SLACK if how == "paused" else STEP_SLACK
    assert longest <= BUDGET + slack, f"a step took {longest:.2f} s (budget {BUDGET:g} s)"
    # every wave applied, in order: wave 2 only after wave 1 was Available, which was after the outage
    assert {r.key.name: r.phase for r in op.results if not r.hook} == {
        "first": TaskPhase.SUCCEEDED, "web": TaskPhase.SUCCEEDED, "last": TaskPhase.SUCCEEDED}
    first, web = gitops.live("ConfigMap", "first"), gitops.live("Deployment", "web", "apps")
    last = gitops.live("ConfigMap", "last")
    assert ts(first) <= ts(web) <= available_since(web) <= ts(last)
    away_for = outage.started - outage.stopped
    assert (ts(last) - ts(web)).total_seconds() >= away_for - 2, "wave 2 began before the outage ended"
