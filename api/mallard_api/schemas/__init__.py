"""Request and response bodies (pydantic v2), one file per entity like `models/`;
`base` holds errors and health, `outbox` the payloads the webhook outbox carries."""

