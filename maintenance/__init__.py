"""Deprecated aliases of the maintenance entry points, kept for one release (see
CHANGELOG.md): ``maintenance.lambda_handler.handler`` and ``python -m maintenance``."""
