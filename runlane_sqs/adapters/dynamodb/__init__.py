"""The DynamoDB run store: key formats, one module per stored item (its wire format and
its requests), sync and async."""
