#!/bin/sh
# Build the Lambda code zip for the docker compose stack (the `package` service runs this
# in python:3.11-slim, the Lambda runtime's Python). Usage: build-lambda-zip.sh OUT.zip
# The repository is mounted read-only at /src (RUNLANE_SRC overrides); RUNLANE_APP_DIR
# (a folder under it) holds your app's modules, else localstack/example/ is used.
set -eu
out="$1"
src="${RUNLANE_SRC:-/src}"
work="$(mktemp -d)"
# Copy the sources: building runlane-sqs writes metadata next to them, $src is read-only.
mkdir -p "$work/src"
cp -r "$src/pyproject.toml" "$src/README.md" "$src/runlane_sqs" "$src/maintenance" "$work/src/"
# runlane-sqs (with the maintenance package) and its dependencies, as the runtime needs.
pip install --quiet --disable-pip-version-check --no-cache-dir --target "$work/build" "$work/src"
# The app: its modules go to the root of the zip, next to the packages.
app_dir="$src/${RUNLANE_APP_DIR:-localstack/example}"
cp -r "$app_dir"/*.py "$work/build/"
# Zip it (the slim image has no zip; Python's zipfile does the same).
rm -f "$out"
(cd "$work/build" && python -m zipfile -c "$out" .)
rm -rf "$work"
echo "built $out"
