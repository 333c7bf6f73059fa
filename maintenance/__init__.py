"""Deployable maintenance entry points: the Lambda handler and the container command."""
