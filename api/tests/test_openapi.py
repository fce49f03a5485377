"""schemathesis against the OpenAPI document: generated requests (valid and invalid)
to every operation of the ASGI app on the real test database; no 5xx, and every
response conforms to the schema (status code, content type, body)."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings
from mallard_api.config import Settings
from mallard_api.main import create_app
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]

# The document only (no database is touched to build it); requests go to the `app`
# fixture, which is backed by the session's real PostgreSQL.
_doc_app = create_app(Settings(database_url="postgresql://doc@127.0.0.1:9/doc",
                               migrate_on_start=False))
schema = schemathesis.openapi.from_dict(_doc_app.openapi())


@schema.parametrize()
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case, app, admin_headers):  # type: ignore[no-untyped-def]
    case.call_and_validate(app=app, headers=admin_headers, checks=CHECKS)
