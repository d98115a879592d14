//! Distributed rate limiting on DynamoDB.
