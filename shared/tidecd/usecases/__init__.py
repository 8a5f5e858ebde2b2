"""What people and triggers ask for: the api, the webhook, the poll, previews, images, ApplicationSets,
migration, adoption and the operation commands. Each module is one use case over the stages below."""
