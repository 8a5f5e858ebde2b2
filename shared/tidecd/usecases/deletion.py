"""Apps removed from the config source: found by the poll, deleted as Argo CD's resources finalizer says.

Argo CD deletes an Application's objects when the Application is deleted and carries
`resources-finalizer.argocd.argoproj.io` (foreground propagation; `.../background`: background), and
leaves them running without it. In tidecd the config source holds the Applications, so removing one from
git is deleting it. Each poll tick (and each push webhook to the config source) `track` keeps the last
spec of every written app with the finalizer (`generated.records.track_written`), and one no longer
declared is *deleting*: the step then runs its PreDelete hooks, prunes its objects wave by wave, runs its
PostDelete hooks and forgets it (`tidecd.step.deletion`). The tick (or the webhook) refreshes it at once.
An app that is only unreadable for now (set aside by a bad file, its team source not loaded, the config
source switched) is never taken for removed. `tidecd app delete` is `usecases.app_write.remove`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from tidecd.base.errors import TidecdError
from tidecd.clients.store import PreconditionFailed
from tidecd.config.load import parse_config_source
from tidecd.generated import records as generated

if TYPE_CHECKING:
    from tidecd.runtime import Runtime

log = structlog.get_logger("tidecd.usecases.deletion")


def track(runtime: Runtime, errors: list[str]) -> list[str]:
    """Record the written apps that cascade, and mark deleting those removed from the config source; the
    apps newly deleting (the runtime then reads the config again)."""
    try:
        source = str(parse_config_source(runtime.settings.config))
        removed = generated.track_written(runtime.store, runtime.config(), source)
    except PreconditionFailed:  # another tick wrote it meanwhile: it did the same
        return []
    except TidecdError as exc:
        errors.append(f"removed apps: {exc}")
        return []
    if removed:
        runtime.forget_config()
        log.info("apps removed from the config source: deleting their objects", apps=removed)
    return removed
