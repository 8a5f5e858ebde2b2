# Refresh fan-out: webhook, poll and api publish one message per application to refresh; a push
# subscription delivers each to reconcile with an OIDC token. A failed delivery (a 5xx, i.e. a
# TemporaryError) is retried with exponential backoff; after reconcile_max_attempts the message moves to
# the dead-letter topic, whose subscription keeps it a week for inspection.
#
# Continuations ride the same topic: a reconcile step that must wait publishes its next step with a
# `notBefore` attribute, and reconcile answers 429 (a nack) to a continuation that arrives early, so the
# retry policy's backoff is the delay (Pub/Sub has no scheduled delivery). Hence a short minimum backoff
# (a health check a few seconds out), a maximum of a minute (a long retry backoff costs a cheap refusal a
# minute), and enough delivery attempts that a continuation due in ~25 minutes is not dead-lettered; one
# that is anyway (or lost with its instance) is resumed by the poll within three minutes of being overdue
# (continuations/<app> in the store).
#
# A push subscription rather than the function's event_trigger: Eventarc owns the subscription it
# creates, so Terraform could not give it a dead-letter policy. functions-framework turns the Pub/Sub
# push body into the same CloudEvent, so reconcile keeps its @functions_framework.cloud_event signature.

locals {
  pubsub_agent  = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
  reconcile_url = google_cloudfunctions2_function.this["reconcile"].service_config[0].uri
}

resource "google_pubsub_topic" "refresh" {
  #checkov:skip=CKV_GCP_83:Messages carry only application names and reasons, no credentials; Google-managed encryption is enough.
  project                    = var.project_id
  name                       = "${var.name_prefix}-refresh"
  message_retention_duration = "86400s"
  labels                     = var.labels

  depends_on = [google_project_service.this]
}

resource "google_pubsub_topic" "dead_letter" {
  #checkov:skip=CKV_GCP_83:Same payload as the refresh topic (application names); Google-managed encryption is enough.
  project = var.project_id
  name    = "${var.name_prefix}-refresh-dead-letter"
  labels  = var.labels

  depends_on = [google_project_service.this]
}

resource "google_pubsub_topic_iam_member" "publisher" {
  for_each = { for name, f in local.functions : name => f if f.publishes }

  project = var.project_id
  topic   = google_pubsub_topic.refresh.name
  role    = "roles/pubsub.publisher"
  member  = google_service_account.function[each.key].member
}

# The identity Pub/Sub signs its push requests with; it may invoke reconcile and nothing else.
resource "google_service_account" "push" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-push"
  display_name = "tidecd refresh push subscription"
}

resource "google_service_account_iam_member" "push_token" {
  service_account_id = google_service_account.push.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_agent
}

resource "google_pubsub_subscription" "reconcile" {
  project                    = var.project_id
  name                       = "${var.name_prefix}-reconcile"
  topic                      = google_pubsub_topic.refresh.id
  ack_deadline_seconds       = 360 # above reconcile's timeout (300 s); a step's waiting is bounded by TIDECD_STEP_BUDGET
  message_retention_duration = "86400s"
  labels                     = var.labels

  push_config {
    push_endpoint = local.reconcile_url

    oidc_token {
      service_account_email = google_service_account.push.email
      audience              = local.reconcile_url
    }
  }

  retry_policy {
    minimum_backoff = "${var.continuation_backoff_seconds.min}s"
    maximum_backoff = "${var.continuation_backoff_seconds.max}s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter.id
    max_delivery_attempts = var.reconcile_max_attempts
  }

  expiration_policy {
    ttl = "" # never expires
  }

  depends_on = [
    google_service_account_iam_member.push_token,
    google_cloud_run_service_iam_member.private,
  ]
}

resource "google_pubsub_subscription" "dead_letter" {
  project                    = var.project_id
  name                       = "${var.name_prefix}-refresh-dead-letter"
  topic                      = google_pubsub_topic.dead_letter.id
  message_retention_duration = "604800s"
  labels                     = var.labels

  expiration_policy {
    ttl = ""
  }
}

# Dead lettering: Pub/Sub's service agent forwards from the subscription to the dead-letter topic.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.dead_letter.name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  project      = var.project_id
  subscription = google_pubsub_subscription.reconcile.name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_agent
}
