output "webhook_url" {
  description = "Payload URL of the GitHub webhook (content type application/json, push events)."
  value       = google_cloudfunctions2_function.this["webhook"].url
}

output "api_url" {
  description = "Base URL of the tidecd api (CLI and dashboard), authenticated by the api-token secret."
  value       = google_cloudfunctions2_function.this["api"].url
}

output "store" {
  description = "TIDECD_STORE of the installation: where state, snapshots and leases live."
  value       = "gs://${google_storage_bucket.state.name}/${var.store_prefix}"
}

output "refresh_topic" {
  description = "TIDECD_REFRESH_TOPIC: the Pub/Sub topic reconcile listens on."
  value       = google_pubsub_topic.refresh.id
}

output "dead_letter_subscription" {
  description = "Subscription holding refreshes reconcile failed on reconcile_max_attempts times."
  value       = google_pubsub_subscription.dead_letter.id
}

output "secret_ids" {
  description = "Secret Manager secret IDs to add versions to: webhook-secret, api-token, api-readonly-token, sealing-keys."
  value       = { for key, secret in google_secret_manager_secret.this : key => secret.secret_id }
}

output "function_service_accounts" {
  description = "Service account e-mail of each function. reconcile's is the Kubernetes user of GKE clusters reached through its Google identity (gke_projects): bind it in each cluster's RBAC (e.g. to impersonate the ServiceAccounts of destinationServiceAccounts)."
  value       = { for name, sa in google_service_account.function : name => sa.email }
}
