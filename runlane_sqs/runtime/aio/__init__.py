"""The asyncio worker, its driver, heartbeats and handler threads."""
