"""The DynamoDB run store: key formats, request builders, item codec, sync and async."""
