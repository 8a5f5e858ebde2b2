"""Every annotation, label and field-manager name tidecd reads or writes, in one place.

The manifest annotations are Argo CD's, so repositories written for Argo CD behave the same under tidecd;
the ownership marks are tidecd's own (see `tidecd.base.ownership`), so tidecd and Argo CD can share a cluster.
"""

from typing import Final

FIELD_MANAGER: Final = "tidecd"

# Ownership (tidecd.base.ownership): the label makes server-side selection cheap, the annotation proves ownership.
LABEL_APP: Final = "tidecd.io/app"
ANNOTATION_TRACKING_ID: Final = "tidecd.io/tracking-id"  # <installation>:<app>:<group>/<kind>:<ns>/<name>
# Argo CD's marks: read to refuse (or adopt) Argo CD's objects; written only for an app that opts in.
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
ANNOTATION_ARGOCD_TRACKING_ID: Final = "argocd.argoproj.io/tracking-id"
ANNOTATION_ARGOCD_INSTALLATION_ID: Final = "argocd.argoproj.io/installation-id"
# On an Application: write Argo CD's tracking id and instance label too (a cluster Argo CD has left).
ANNOTATION_WRITE_ARGOCD_TRACKING: Final = "tidecd.io/write-argocd-tracking"
# On an Application: take its objects over from the Argo CD Application named (`[<namespace>/]<name>`).
ANNOTATION_ADOPT_FROM_ARGOCD: Final = "tidecd.io/adopt-from-argocd"
ARGOCD_RESOURCES_FINALIZER: Final = "resources-finalizer.argocd.argoproj.io"
# Stamped on the hooks an operation creates: a resumed step finds its own hook instead of creating another.
ANNOTATION_OPERATION: Final = "tidecd.io/operation-id"

ANNOTATION_SYNC_WAVE: Final = "argocd.argoproj.io/sync-wave"
ANNOTATION_HOOK: Final = "argocd.argoproj.io/hook"
ANNOTATION_HOOK_DELETE_POLICY: Final = "argocd.argoproj.io/hook-delete-policy"
ANNOTATION_SYNC_OPTIONS: Final = "argocd.argoproj.io/sync-options"
ANNOTATION_COMPARE_OPTIONS: Final = "argocd.argoproj.io/compare-options"
COMPARE_IGNORE_EXTRANEOUS: Final = "IgnoreExtraneous"  # a value of ANNOTATION_COMPARE_OPTIONS
ANNOTATION_MANIFEST_GENERATE_PATHS: Final = "argocd.argoproj.io/manifest-generate-paths"

# Notifications (Argo CD Notifications' annotation) and GitHub write-back (tidecd's own).
NOTIFICATIONS_SUBSCRIBE_PREFIX: Final = "notifications.argoproj.io/subscribe."
ANNOTATION_GITHUB_DEPLOYMENT: Final = "tidecd.io/github-deployment"  # value: the GitHub environment name

HELM_HOOK: Final = "helm.sh/hook"
HELM_HOOK_WEIGHT: Final = "helm.sh/hook-weight"
HELM_HOOK_DELETE_POLICY: Final = "helm.sh/hook-delete-policy"

LAST_APPLIED: Final = "kubectl.kubernetes.io/last-applied-configuration"

# Credentials kept as (sealed) Secrets, in Argo CD's format.
LABEL_SECRET_TYPE: Final = "argocd.argoproj.io/secret-type"
SECRET_TYPE_CLUSTER: Final = "cluster"
SECRET_TYPE_REPOSITORY: Final = "repository"
SECRET_TYPE_REPO_CREDS: Final = "repo-creds"
SECRET_TYPE_GITHUB: Final = "github"  # tidecd: GitHub write-back credentials (token or GitHub App)
SECRET_TYPE_SCM_CREDS: Final = "scm-creds"  # Argo CD's label for a generator's tokenRef Secret (its strict mode)
SECRET_TYPE_NOTIFICATIONS: Final = "notifications"  # tidecd: notification targets (URLs, HMAC keys)

SEALED_SCOPE_NAMESPACE_WIDE: Final = "sealedsecrets.bitnami.com/namespace-wide"
SEALED_SCOPE_CLUSTER_WIDE: Final = "sealedsecrets.bitnami.com/cluster-wide"

ARGO_GROUP: Final = "argoproj.io"
ARGO_VERSION: Final = "argoproj.io/v1alpha1"

HISTORY_LIMIT: Final = 10

# The webhook function's audit routes (`tidecd.usecases.audit`), here so that routing a delivery imports no use case.
AUDIT_PATH: Final = "/audit"  # the webhook function's path the audit backend's kubeconfig points at
AUDIT_GKE_PATH: Final = "/audit/gke"  # where the Log Router sink's Pub/Sub subscription pushes GKE's audit log entries

AUTO_ROLLBACK: Final = "auto-rollback"  # who started a rollback tidecd made by itself (`step.autorollback`; notify)
