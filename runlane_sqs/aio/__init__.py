"""The asyncio worker (needs the ``async`` extra: ``pip install 'runlane-sqs[async]'``).

import asyncio
from runlane_sqs.aio import AsyncWorker

asyncio.run(AsyncWorker(app, concurrency=32).run())
"""

from runlane_sqs.runtime.aio.worker import AsyncWorker

__all__ = ["AsyncWorker"]
