"""Sources: resolve what an app's `source` names and snapshot it into the object store.

- `tidecd.source.git`: git repositories (dulwich): ls-remote, revision resolution, commit snapshots.
- `tidecd.source.helmrepo`: helm chart repositories over HTTP(S) (`index.yaml`).
- `tidecd.source.oci`: OCI registries: helm charts and plain artifacts of manifests.
- `tidecd.source.charts`: chart sources as verified snapshots, for both of the above.
- `tidecd.source.versions`: semver constraints in `targetRevision`.

The git names stay importable from `tidecd.source` itself (`source.ls_remote`, `source.Snapshots`, ...).
"""

from tidecd.source.git import *  # noqa: F403 - the package's historical names
