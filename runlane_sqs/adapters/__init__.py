"""Adapters: the ports implemented for DynamoDB, SQS, memory and threads."""
