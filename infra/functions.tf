# The four functions, one service account each, and who may invoke them.

resource "google_service_account" "function" {
  for_each = local.functions

  project      = var.project_id
  account_id   = "${var.name_prefix}-${each.key}"
  display_name = "tidecd ${each.key} function"
  description  = each.value.description
}

# Builds the function images: writes build logs, reads the source, pushes to its own repository.
resource "google_service_account" "build" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-build"
  display_name = "tidecd function builds"
}

resource "google_project_iam_member" "build_logs" {
  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = google_service_account.build.member
}

# Cloud Functions copies the uploaded archive into its own gcf-v2-sources-* bucket, which does not
# exist before the first deploy; the condition keeps the grant to those buckets.
resource "google_project_iam_member" "build_sources" {
  project = var.project_id
  role    = "roles/storage.objectViewer"
  member  = google_service_account.build.member

  condition {
    title      = "gcf-sources-only"
    expression = "resource.name.startsWith(\"projects/_/buckets/gcf-v2-sources-${data.google_project.this.number}-\")"
  }
}

resource "google_storage_bucket_iam_member" "build_sources" {
  bucket = google_storage_bucket.sources.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.build.member
}

resource "google_artifact_registry_repository" "functions" {
  #checkov:skip=CKV_GCP_84:Images are rebuilt from the public source archive; Google-managed encryption is enough.
  project       = var.project_id
  location      = var.region
  repository_id = "${var.name_prefix}-functions"
  format        = "DOCKER"
  description   = "Images of the tidecd functions"
  labels        = var.labels

  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = 5
    }
  }

  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      older_than = "2592000s" # 30 days
    }
  }

  depends_on = [google_project_service.this]
}

resource "google_artifact_registry_repository_iam_member" "build" {
  project    = var.project_id
  location   = google_artifact_registry_repository.functions.location
  repository = google_artifact_registry_repository.functions.name
  role       = "roles/artifactregistry.writer"
  member     = google_service_account.build.member
}

resource "google_cloudfunctions2_function" "this" {
  #checkov:skip=CKV_GCP_124:webhook and api must accept calls from GitHub and the CLI (ALLOW_ALL); poll, images and reconcile are ALLOW_INTERNAL_ONLY (tests/unit/test_infra.py checks both).
  for_each = local.functions

  project     = var.project_id
  location    = var.region
  name        = "${var.name_prefix}-${each.key}"
  description = each.value.description
  labels      = var.labels

  build_config {
    runtime           = "python311"
    entry_point       = each.value.entry_point
    service_account   = google_service_account.build.id
    docker_repository = google_artifact_registry_repository.functions.id

    source {
      storage_source {
        bucket = google_storage_bucket.sources.name
        object = google_storage_bucket_object.source.name
      }
    }
  }

  service_config {
    available_memory                 = local.sizes[each.key].memory
    available_cpu                    = local.sizes[each.key].cpu
    timeout_seconds                  = local.sizes[each.key].timeout_seconds
    min_instance_count               = 0
    max_instance_count               = local.sizes[each.key].max_instances
    max_instance_request_concurrency = 1
    ingress_settings                 = each.value.public ? "ALLOW_ALL" : "ALLOW_INTERNAL_ONLY"
    all_traffic_on_latest_revision   = true
    service_account_email            = google_service_account.function[each.key].email

    environment_variables = merge(
      local.common_env,
      each.value.sealing_keys ? { TIDECD_SEALING_KEYS = local.sealing_keys_dir } : {},
    )

    dynamic "secret_environment_variables" {
      for_each = each.value.secret_env
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = google_secret_manager_secret.this[secret_environment_variables.value].secret_id
        version    = "latest"
      }
    }

    dynamic "secret_volumes" {
      for_each = each.value.sealing_keys ? ["sealing-keys"] : []
      content {
        mount_path = local.sealing_keys_dir
        project_id = var.project_id
        secret     = google_secret_manager_secret.this[secret_volumes.value].secret_id

        dynamic "versions" {
          for_each = var.sealing_key_versions
          content {
            version = versions.value
            path    = "key-${versions.value}.pem"
          }
        }
      }
    }
  }

  depends_on = [
    google_project_service.this,
    google_secret_manager_secret_iam_member.access,
    google_storage_bucket_iam_member.build_sources,
    google_project_iam_member.build_logs,
    google_project_iam_member.build_sources,
    google_artifact_registry_repository_iam_member.build,
  ]
}

# Who may call each function: anyone for webhook and api (they authenticate each request themselves),
# the scheduler's identity for poll and images, the push subscription's identity for reconcile.
resource "google_cloud_run_service_iam_member" "public" {
  #checkov:skip=CKV_GCP_102:Only webhook (HMAC-signed by GitHub) and api (bearer token) are public: their callers cannot send Google ID tokens, so each authenticates the request itself.
  for_each = local.public_functions

  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.this[each.key].service_config[0].service
  role     = "roles/run.invoker"
  member   = "allUsers"
}

locals {
  invokers = {
    poll      = google_service_account.scheduler.member
    images    = google_service_account.scheduler.member
    reconcile = google_service_account.push.member
  }
}

resource "google_cloud_run_service_iam_member" "private" {
  for_each = local.invokers

  project  = var.project_id
  location = var.region
  service  = google_cloudfunctions2_function.this[each.key].service_config[0].service
  role     = "roles/run.invoker"
  member   = each.value
}
