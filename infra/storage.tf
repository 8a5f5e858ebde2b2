# Two buckets: the function source archives (read by the build) and the tidecd state (read and written
# by the functions). Neither is public; both keep old versions for a while.

resource "google_storage_bucket" "sources" {
  #checkov:skip=CKV_GCP_62:Access logs of build artifacts add cost and no signal; Cloud Audit Logs record access.
  project                     = var.project_id
  name                        = "${var.project_id}-${var.name_prefix}-sources"
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = true # only rebuildable archives live here
  labels                      = var.labels

  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 30
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.this]
}

# The object name carries the archive's hash, so a new `make package` redeploys the functions.
resource "google_storage_bucket_object" "source" {
  bucket = google_storage_bucket.sources.name
  name   = "tidecd-functions-${filemd5(local.source_zip)}.zip"
  source = local.source_zip
}

resource "google_storage_bucket" "state" {
  #checkov:skip=CKV_GCP_62:The functions write here every poll tick; Cloud Audit Logs (data access) are the better record.
  project                     = var.project_id
  name                        = "${var.project_id}-${var.name_prefix}-state"
  location                    = var.region
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false
  labels                      = var.labels

  versioning {
    enabled = true
  }

  # Retention (tidecd.retention): deliveries, snapshots and manifests expire by age. Snapshots and
  # manifests are caches, fetched or rendered again when needed; a delivery is only a redelivery guard.
  dynamic "lifecycle_rule" {
    for_each = local.retention_prefixes
    content {
      condition {
        age            = lifecycle_rule.value
        matches_prefix = ["${var.store_prefix}/${lifecycle_rule.key}"]
      }
      action {
        type = "Delete"
      }
    }
  }

  # State objects are rewritten often; keep a month of history to recover from a bad write.
  lifecycle_rule {
    condition {
      days_since_noncurrent_time = 30
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.this]
}

# Each function reads and writes objects (state, snapshots, leases, deliveries); none manages the bucket.
resource "google_storage_bucket_iam_member" "state" {
  for_each = local.functions

  bucket = google_storage_bucket.state.name
  role   = "roles/storage.objectUser"
  member = google_service_account.function[each.key].member
}
