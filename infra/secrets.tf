# Secret Manager holds the credentials; Terraform creates the secrets but never their values, so no
# credential lands in the Terraform state. Add the versions with gcloud (see README.md).

resource "google_secret_manager_secret" "this" {
  for_each = local.secrets

  project   = var.project_id
  secret_id = "${var.name_prefix}-${each.key}"
  labels    = merge(var.labels, { purpose = each.key })

  annotations = {
    description = each.value
  }

  replication {
    auto {}
  }

  depends_on = [google_project_service.this]
}

resource "google_secret_manager_secret_iam_member" "access" {
  for_each = local.secret_reads

  project   = var.project_id
  secret_id = google_secret_manager_secret.this[each.value.secret].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.function[each.value.function].member
}
