//! DynamoDB Streams processor.
