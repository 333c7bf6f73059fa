"""The app facade, the operator API and the JSON shapes they share (docs/design/architecture.md)."""
