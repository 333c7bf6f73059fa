"""In-memory run store and wakeup transport (public through :mod:`runlane_sqs.testing`)."""
