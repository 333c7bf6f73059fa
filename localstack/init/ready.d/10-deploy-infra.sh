#!/bin/bash
# LocalStack init hook (runs inside the localstack container once it is ready): deploy
# every CloudFormation template in infra/ (mounted at /opt/runlane/infra) as a stack of
# its own, with `awslocal cloudformation deploy`. See docs/local-localstack.md.
#
# Variables (set in localstack/docker-compose.yml, overridable from the shell):
#   RUNLANE_DEPLOY_INFRA      0 skips the deploy (default 1)
#   RUNLANE_STACK_PREFIX      stack name prefix (default runlane-local): each template
#                             infra/NAME.yaml becomes the stack PREFIX-NAME
#   RUNLANE_APP               module:attribute of the app (default local_jobs:app, the
#                             example in localstack/example/)
#   RUNLANE_STACK_PARAMETERS  extra Key=Value overrides, space separated
set -euo pipefail

if [[ "${RUNLANE_DEPLOY_INFRA:-1}" == "0" ]]; then
    echo "runlane: RUNLANE_DEPLOY_INFRA=0, not deploying infra/"
    exit 0
fi

infra=/opt/runlane/infra
prefix="${RUNLANE_STACK_PREFIX:-runlane-local}"
app="${RUNLANE_APP:-local_jobs:app}"
bucket="${prefix}-code"
key="lambda/runlane-lambda-$(date +%s).zip"

# The Lambda code zip built by the compose `package` service: upload it to a bucket of
# LocalStack's S3, where the templates' LambdaCodeBucket/LambdaCodeKey point.
awslocal s3 mb "s3://$bucket" >/dev/null 2>&1 || true
awslocal s3 cp /opt/runlane/build/runlane-lambda.zip "s3://$bucket/$key"

# Overrides for local use. `cloudformation deploy` passes a template only the
# parameters it declares, so one list serves every template. ECS is not part of
# LocalStack's community image: no worker service here (the consumer Lambda consumes).
overrides=(
    "Environment=local"
    "AppSpec=$app"
    "LambdaCodeBucket=$bucket"
    "LambdaCodeKey=$key"
    "ConsumerHandler=${app%%:*}.handler"
    "DeployEcsWorker=false"
    "LogRetentionDays=1"
)
# shellcheck disable=SC2206 # word splitting of the extra overrides is intended
overrides+=(${RUNLANE_STACK_PARAMETERS:-})

shopt -s nullglob
templates=("$infra"/*.yaml "$infra"/*.yml "$infra"/*.json)
if [[ ${#templates[@]} -eq 0 ]]; then
    echo "runlane: no templates in $infra"
    exit 0
fi
for template in "${templates[@]}"; do
    name="$(basename "$template")"
    stack="$prefix-${name%.*}"
    echo "runlane: deploying $name as stack $stack"
    awslocal cloudformation deploy \
        --stack-name "$stack" \
        --template-file "$template" \
        --capabilities CAPABILITY_IAM CAPABILITY_NAMED_IAM \
        --no-fail-on-empty-changeset \
        --parameter-overrides "${overrides[@]}"
    awslocal cloudformation describe-stacks --stack-name "$stack" \
        --query "Stacks[0].Outputs" --output table
done
