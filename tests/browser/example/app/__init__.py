"""A shop's tasks (``app.tasks``) and its app (``app.main:app``), as a user's package."""
