#!/bin/sh
# Build the Lambda code zip for the docker compose stack (the `package` service runs this
# in python:3.11-slim, the Lambda runtime's Python). Usage: build-lambda-zip.sh OUT.zip
# The repository is mounted read-only at /src (RUNLANE_SRC overrides); RUNLANE_APP_DIR
# (a folder under it) holds your app's modules, else localstack/example/ is used.
#
# The zip holds runlane-sqs (with the maintenance package), what its Lambda entry points
# import, and the app; not what the Lambda runtime provides (boto3, botocore and their
# dependencies) nor what only the CLI uses (click, rich, python-json-logger).
# lambda_requirements.py, beside this script, derives that list from pyproject.toml.
# The zip's size is printed; over RUNLANE_ZIP_LIMIT_BYTES (default 5000000, 5 MB) the
# build fails (the zip is left in place to look into). PYTHON names the interpreter whose
# pip builds it (default: python).
set -eu
out="$1"
case "$out" in /*) ;; *) out="$(pwd)/$out" ;; esac
src="${RUNLANE_SRC:-/src}"
python="${PYTHON:-python}"
limit="${RUNLANE_ZIP_LIMIT_BYTES:-5000000}"
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
pip_quiet() {
    "$python" -m pip --quiet --disable-pip-version-check --no-cache-dir "$@"
}
# Copy the sources: building runlane-sqs writes metadata next to them, $src is read-only.
mkdir -p "$work/src"
cp -r "$src/pyproject.toml" "$src/README.md" "$src/LICENSE" "$src/runlane_sqs" \
    "$src/maintenance" "$work/src/"
# runlane-sqs (with the maintenance package) alone; its console script is for the CLI.
pip_quiet install --no-deps --target "$work/build" "$work/src"
rm -rf "$work/build/bin"
# Its dependencies the Lambda code needs, and what those need in turn, less the runtime's.
"$python" "$here/lambda_requirements.py" "$src/pyproject.toml" >"$work/requirements.txt"
pip_quiet install --dry-run --ignore-installed --report "$work/report.json" \
    -r "$work/requirements.txt"
"$python" "$here/lambda_requirements.py" --pins "$work/report.json" >"$work/pins.txt"
pip_quiet install --no-deps --target "$work/build" -r "$work/pins.txt"
echo "packages: runlane-sqs $(paste -sd ' ' "$work/pins.txt")"
# The app: its modules go to the root of the zip, next to the packages.
app_dir="$src/${RUNLANE_APP_DIR:-localstack/example}"
cp -r "$app_dir"/*.py "$work/build/"
# Compile the bytecode now: /var/task is read-only, so without usable .pyc files every cold
# start compiles runlane-sqs and its dependencies again (about 220 ms). unchecked-hash
# makes Python use them whatever the files' modification times in the zip.
"$python" -m compileall -q -f --invalidation-mode unchecked-hash "$work/build" >/dev/null
# Zip it (the slim image has no zip; Python's zipfile does the same).
rm -f "$out"
(cd "$work/build" && "$python" -m zipfile -c "$out" .)
bytes="$(wc -c <"$out" | tr -d ' ')"
megabytes="$(awk -v b="$bytes" 'BEGIN { printf "%.2f", b / 1000000 }')"
echo "built $out: $bytes bytes ($megabytes MB; limit $limit bytes)"
if [ "$bytes" -gt "$limit" ]; then
    echo "error: $out is $bytes bytes, over the limit of $limit (RUNLANE_ZIP_LIMIT_BYTES)" >&2
    exit 1
fi
