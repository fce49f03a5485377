"""schemathesis against the OpenAPI document, every check schemathesis has (`--checks
all`): generated requests, valid and invalid, to every operation of the ASGI app on the
real test database. Above all, no response is a 5xx; and every response conforms to the
document (status code, content type, headers, body), invalid data is rejected, methods
the document does not list get 405 with a correct Allow header.

One allowance, stated here: schema-valid data may still be answered 422 when it breaks
a rule the schema cannot carry (a project that must exist, a repo_url outside the
deployment's allow-list, a ref that is not a git ref name, a suite that is not one of
the runner's), and 409 when a job's lease is not the poster's."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings
from mallard_api.config import Settings
from mallard_api.main import create_app
from schemathesis.checks import CHECKS as REGISTRY
from schemathesis.checks import load_all_checks

load_all_checks()
CHECKS = REGISTRY.get_all()
CONFIG = schemathesis.Config.from_dict({"checks": {"positive_data_acceptance": {
    "expected-statuses": ["2xx", "401", "403", "404", "409", "422"]}}})

# The document only (no database is touched to build it); requests go to the `app`
# fixture, which is backed by the session's real PostgreSQL.
_doc_app = create_app(Settings(database_url="postgresql://doc@127.0.0.1:9/doc",
                               migrate_on_start=False))
schema = schemathesis.openapi.from_dict(_doc_app.openapi(), config=CONFIG)


def test_all_checks_are_used():
    assert len(CHECKS) >= 14 and "not_a_server_error" in REGISTRY.get_all_names()


@schema.parametrize()
@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case, app, admin_headers):  # type: ignore[no-untyped-def]
    case.call_and_validate(app=app, headers=admin_headers, checks=CHECKS)


def test_the_document_served_is_the_apps_rendered_once(client, app):  # type: ignore[no-untyped-def]
    """/openapi.json is served from bytes rendered at its first request (main.py): the
    app's document, the same bytes every time."""
    first, second = client.get("/openapi.json"), client.get("/openapi.json")
    assert first.status_code == 200 and first.headers["content-type"] == "application/json"
    assert first.json() == app.openapi() and first.content == second.content
