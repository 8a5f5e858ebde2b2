"""Sources: resolve what an app's `source` names and snapshot it into the object store.

- `tidecd.source.git`: git repositories (dulwich): ls-remote, revision resolution, commit snapshots.
- `tidecd.source.gitremote`: reaching a git remote: credentials, the dulwich client, transport errors.
- `tidecd.source.archive`: snapshots as archives: a deterministic tar of a tree, checked extraction.
- `tidecd.source.helmrepo`: helm chart repositories over HTTP(S) (`index.yaml`).
- `tidecd.source.oci`: OCI registries: helm charts and plain artifacts of manifests.
- `tidecd.source.charts`: chart sources as verified snapshots, for both of the above.
- `tidecd.source.versions`: semver constraints in `targetRevision`.

The git names stay importable from `tidecd.source` itself (`source.ls_remote`, `source.Snapshots`, ...).
"""

from tidecd.source.archive import *  # noqa: F403 - the package's historical names
from tidecd.source.git import *  # noqa: F403
from tidecd.source.gitremote import *  # noqa: F403
