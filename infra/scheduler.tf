# Cloud Scheduler calls poll every three minutes and images every two, with an OIDC token of its own
# service account.

resource "google_service_account" "scheduler" {
  project      = var.project_id
  account_id   = "${var.name_prefix}-scheduler"
  display_name = "tidecd poll and images schedules"
}

resource "google_cloud_scheduler_job" "poll" {
  project          = var.project_id
  region           = var.region
  name             = "${var.name_prefix}-poll"
  description      = "Polls every repository of the config source for new commits."
  schedule         = "*/3 * * * *"
  time_zone        = "Etc/UTC"
  attempt_deadline = "180s"

  retry_config {
    retry_count = 0 # the next tick is three minutes away
  }

  http_target {
    http_method = "POST"
    uri         = google_cloudfunctions2_function.this["poll"].service_config[0].uri

    oidc_token {
      service_account_email = google_service_account.scheduler.email
      audience              = google_cloudfunctions2_function.this["poll"].service_config[0].uri
    }
  }

  depends_on = [google_project_service.this, google_cloud_run_service_iam_member.private]
}

resource "google_cloud_scheduler_job" "images" {
  project          = var.project_id
  region           = var.region
  name             = "${var.name_prefix}-images"
  description      = "Checks the image registries of annotated applications for new tags."
  schedule         = "*/2 * * * *"
  time_zone        = "Etc/UTC"
  attempt_deadline = "120s"

  retry_config {
    retry_count = 0 # the next tick is two minutes away
  }

  http_target {
    http_method = "POST"
    uri         = google_cloudfunctions2_function.this["images"].service_config[0].uri

    oidc_token {
      service_account_email = google_service_account.scheduler.email
      audience              = google_cloudfunctions2_function.this["images"].service_config[0].uri
    }
  }

  depends_on = [google_project_service.this, google_cloud_run_service_iam_member.private]
}
