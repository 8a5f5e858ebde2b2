# Events in: the clusters and the registries already report every change; Pub/Sub pushes them to the
# webhook function, so drift and new image tags are noticed in seconds with nothing running between events.
#
#   GKE project P ── Log Router sink (Admin Activity, k8s.io) ──► topic <prefix>-audit ──push──► webhook /audit/gke
#   Artifact Registry project R ── its `gcr` topic ─────────────────────────────────push──► webhook /registry/gcr
#
# The webhook function is public (GitHub and the registries cannot send Google ID tokens), so Cloud Run's
# IAM does not check these pushes: each carries an OIDC token of the `events` service account with the
# audience local.push_audience, and the function verifies its signature, audience and signer itself
# (shared/tidecd/clients/pushauth.py; TIDECD_PUSH_AUDIENCE and TIDECD_PUSH_SERVICE_ACCOUNT in main.tf).
# Old events are worth nothing (the poll and the images tick are the fallbacks): messages are kept an hour.

locals {
  webhook_url = google_cloudfunctions2_function.this["webhook"].service_config[0].uri
}

# The identity Pub/Sub signs its pushes to the webhook with; the function accepts no other.
resource "google_service_account" "events" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-events"
  display_name = "tidecd event pushes to the webhook"
}

resource "google_service_account_iam_member" "events_token" {
  service_account_id = google_service_account.events.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_agent
}

resource "google_pubsub_topic" "audit" {
  #checkov:skip=CKV_GCP_83:Kubernetes audit log entries name objects and users, no credentials (request bodies are not in Admin Activity entries); Google-managed encryption is enough.
  project                    = var.project_id
  name                       = "${var.name_prefix}-audit"
  message_retention_duration = "3600s"
  labels                     = var.labels

  depends_on = [google_project_service.this]
}

# One sink per destination project, each with its own writer identity, which may publish to the topic.
resource "google_logging_project_sink" "audit" {
  for_each = local.audit_log_filters

  project                = each.key
  name                   = "${var.name_prefix}-gke-audit"
  description            = "GKE Admin Activity audit logs to tidecd (drift noticed in seconds)"
  destination            = "pubsub.googleapis.com/${google_pubsub_topic.audit.id}"
  filter                 = each.value
  unique_writer_identity = true
}

resource "google_pubsub_topic_iam_member" "audit_sink" {
  for_each = google_logging_project_sink.audit

  project = var.project_id
  topic   = google_pubsub_topic.audit.name
  role    = "roles/pubsub.publisher"
  member  = each.value.writer_identity
}

resource "google_pubsub_subscription" "audit" {
  project                    = var.project_id
  name                       = "${var.name_prefix}-audit-webhook"
  topic                      = google_pubsub_topic.audit.id
  ack_deadline_seconds       = 120 # above the webhook's timeout (110 s)
  message_retention_duration = "3600s"
  labels                     = var.labels

  push_config {
    push_endpoint = "${local.webhook_url}${local.event_routes.audit}"

    oidc_token {
      service_account_email = google_service_account.events.email
      audience              = local.push_audience
    }
  }

  retry_policy {
    minimum_backoff = "5s"
    maximum_backoff = "60s"
  }

  expiration_policy {
    ttl = "" # never expires
  }

  depends_on = [google_service_account_iam_member.events_token]
}

# Artifact Registry publishes every upload and tag to the `gcr` topic of its project.
resource "google_pubsub_subscription" "registry" {
  for_each = toset(var.artifact_registry_projects)

  project                    = var.project_id
  name                       = "${var.name_prefix}-gcr-${each.key}"
  topic                      = "projects/${each.key}/topics/gcr"
  ack_deadline_seconds       = 120 # above the webhook's timeout (110 s)
  message_retention_duration = "3600s"
  labels                     = var.labels

  push_config {
    push_endpoint = "${local.webhook_url}${local.event_routes.gcr}"

    oidc_token {
      service_account_email = google_service_account.events.email
      audience              = local.push_audience
    }
  }

  retry_policy {
    minimum_backoff = "5s"
    maximum_backoff = "60s"
  }

  expiration_policy {
    ttl = ""
  }

  depends_on = [google_service_account_iam_member.events_token]
}
