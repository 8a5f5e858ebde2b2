"""Session-wide fixtures: one real control plane, one git server, one GCS emulator per test session.

Each fixture lives in its own module under tests/support/ and starts its service on first use only,
so a unit-only run starts nothing. `make test` runs the suite on two pytest-xdist workers, each a session
of its own; tests/support/xdist_groups.py says which tests go together, and in what order.
"""

pytest_plugins = [
    "tests.support.cluster",
    "tests.support.gitserver",
    "tests.support.gcs",
    "tests.support.pubsub",
    "tests.support.apps",
    "tests.support.functions",
    "tests.support.github_standin",
    "tests.support.gitlab_standin",
    "tests.support.charts",
    "tests.support.browser",
    "tests.support.examples",
    "tests.support.registry",
    "tests.support.github_repos",
    "tests.support.argocd_catalogue",
    "tests.support.peers",
    "tests.support.sealing",
    "tests.support.receivers",
    "tests.support.xdist_groups",
]


def pytest_sessionfinish(session, exitstatus):  # type: ignore[no-untyped-def]
    """Fail the run if any process started under this session's temp dirs outlived it."""
    import os
    import time

    import psutil

    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None:
        return
    base = str(factory.getbasetemp())
    deadline = time.monotonic() + 10
    while True:
        left = []
        for proc in psutil.process_iter(["pid", "cmdline", "environ"]):
            cmdline = " ".join(proc.info["cmdline"] or [])
            environ = " ".join((proc.info["environ"] or {}).values())
            if base in cmdline or (base in environ and proc.pid != os.getpid()):
                left.append(f"{proc.pid}: {cmdline[:160]}")
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    if left:
        print("\nprocesses left behind by the test session:\n  " + "\n  ".join(left))
        session.exitstatus = 1
