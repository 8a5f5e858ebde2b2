# GKE destinations reached through reconcile's own Google identity (docs/security.md, "Least privilege on clusters"):
# a cluster Secret whose config is `{"execProviderConfig": {"command": "argocd-k8s-auth", "args": ["gcp"]}}`
# (or gke-gcloud-auth-plugin) gets short-lived access tokens of `tidecd-reconcile@` from google-auth, and
# the sealed Secret holds no token. GKE asks IAM for `container.clusters.get` before Kubernetes RBAC: this
# role grants only that (read cluster metadata), nothing inside the cluster. What reconcile may change there
# is the cluster's own RBAC for its e-mail (output function_service_accounts["reconcile"]).
resource "google_project_iam_member" "gke_reconcile" {
  for_each = toset(var.gke_projects)

  project = each.key
  role    = "roles/container.clusterViewer"
  member  = google_service_account.function["reconcile"].member
}
