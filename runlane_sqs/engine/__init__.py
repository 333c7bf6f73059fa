"""The engine: services over the ports, each given its collaborators, and the
per-message path."""
