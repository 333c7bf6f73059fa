"""The benchmark suite behind ``make bench``: cost per run, throughput against Celery on
the same SQS endpoint, maintenance scaling, latency and worker memory.

Run ``python -m bench --help``. Not part of the package or of ``make test``.
"""
