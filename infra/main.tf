# tidecd on Google Cloud: five functions sharing one source archive, one state bucket and one refresh topic.
#
#   GitHub push ──► webhook ─┐                              ┌─► reconcile (push subscription, OIDC,
#   Scheduler */3 ─► poll ───┼─► Pub/Sub topic "refresh" ───┤    retries with backoff, dead letters)
#   Scheduler */2 ─► images ─┤  (new image tags → git commits / overrides, then refreshes)
#   CLI / UI ──────► api ────┘                              └─► dead-letter topic + subscription
#
# wiring.tf says what each function is and needs; every resource below is derived from it.

locals {
  source_zip = coalesce(var.source_zip, "${path.module}/../dist/tidecd-functions.zip")

  # Environment of every function (DESIGN.md section 8); the secrets are added per function.
  common_env = {
    TIDECD_CONFIG        = var.config_source
    TIDECD_STORE         = "gs://${google_storage_bucket.state.name}/${var.store_prefix}"
    TIDECD_REFRESH_TOPIC = google_pubsub_topic.refresh.id
    TIDECD_STEP_BUDGET   = tostring(var.step_budget_seconds)
    # links in GitHub statuses and notifications; GitHub Enterprise API (tidecd.github)
    TIDECD_PUBLIC_URL     = var.public_url
    TIDECD_GITHUB_API_URL = var.github_api_url
    TIDECD_BIN_DIR        = "/workspace/bin" # helm and kustomize, packaged beside main.py
    # who a Pub/Sub push to the webhook must be (events.tf): the audience and signer of its OIDC token
    TIDECD_PUSH_AUDIENCE        = local.push_audience
    TIDECD_PUSH_SERVICE_ACCOUNT = google_service_account.events.email
    LOG_EXECUTION_ID            = "true"
    # the same numbers as the bucket's lifecycle rules (tidecd.retention)
    TIDECD_RETAIN_DELIVERIES_DAYS = tostring(var.retention.deliveries_days)
    TIDECD_RETAIN_SNAPSHOTS_DAYS  = tostring(var.retention.snapshots_days)
    TIDECD_RETAIN_MANIFESTS_DAYS  = tostring(var.retention.manifests_days)
    TIDECD_HISTORY_LIMIT          = tostring(var.retention.history_limit)
  }

  retention_prefixes = {
    "deliveries/" = var.retention.deliveries_days
    "snapshots/"  = var.retention.snapshots_days
    "manifests/"  = var.retention.manifests_days
    # the loaded config by commit (tidecd.config.cache): a cache, loaded in full again when expired
    "config-cache/" = var.retention.snapshots_days
  }

  apis = toset(var.enable_apis ? [
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudfunctions.googleapis.com",
    "cloudscheduler.googleapis.com",
    "iam.googleapis.com",
    "logging.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
  ] : [])
}

data "google_project" "this" {
  project_id = var.project_id
}

resource "google_project_service" "this" {
  for_each = local.apis

  project            = var.project_id
  service            = each.key
  disable_on_destroy = false
}
