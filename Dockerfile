# The runlane-sqs worker image: `runlane-sqs worker` as a non-root user.
#
# Your tasks live in your own package: build an image FROM this one that installs it
# and names the app (see docs/deploy-ecs.md):
#
#   FROM runlane-sqs-worker:0.1
#   USER root
#   COPY . /src
#   RUN pip install --no-cache-dir /src && rm -rf /src
#   USER 10001:10001
#   ENV RUNLANE_APP=myproject.jobs:app
#
# Shutdown: ECS (and `docker stop`) sends SIGTERM, then SIGKILL after the task's
# stopTimeout (120 s at most on Fargate; `docker stop -t`). On SIGTERM the worker stops
# receiving, sets every in-flight attempt's cancellation event, waits up to
# --grace-period seconds (25 by default; infra/runlane.yaml passes 100 with a
# stopTimeout of 120), releases the messages it had not started and exits. An attempt
# still running at SIGKILL loses its lease, and maintenance makes the run runnable again.
# CMD is in exec form, so the worker is PID 1 (or the direct child of ECS's init process,
# initProcessEnabled) and receives the signal itself.
#
# The web console runs from the same image with another command (docs/operations.md,
# "Web console"): `runlane-sqs console --host 0.0.0.0` with RUNLANE_CONSOLE_TOKEN set.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY runlane_sqs ./runlane_sqs
COPY maintenance ./maintenance
# with the console extra: the same image serves `runlane-sqs console` (docs/console.md)
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[console]"

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN groupadd --system --gid 10001 runlane \
    && useradd --system --uid 10001 --gid runlane --home-dir /app --no-create-home \
       --shell /usr/sbin/nologin runlane
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
WORKDIR /app
USER 10001:10001

# The worker serves no port and writes no liveness file, so this checks what can be
# checked from outside it: the interpreter, the installed package and the RUNLANE_*
# configuration. A worker that dies ends the container (ECS then replaces the task).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "from runlane_sqs import RunlaneConfig; RunlaneConfig.from_env()"]

STOPSIGNAL SIGTERM
CMD ["runlane-sqs", "worker"]
