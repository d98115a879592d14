#!/bin/sh
# Runs inside the LocalStack container once every service is ready: reports what dynalimit
# needs. Tables and stacks are created by the tests and the CLI themselves.
set -eu
echo "dynalimit: LocalStack ready; services:"
awslocal dynamodb list-tables --output text >/dev/null && echo "  dynamodb ok"
awslocal cloudformation list-stacks --output text >/dev/null && echo "  cloudformation ok"
