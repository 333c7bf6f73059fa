"""Workers: the sync worker, its driver, heartbeats and pacing; the asyncio worker in ``aio``."""
