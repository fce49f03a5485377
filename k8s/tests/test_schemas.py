"""Every rendered object validates against the Kubernetes schemas of a current release.

The schemas come from the kubernetes-validate package (no download). Objects of
custom resources (CloudNativePG Cluster, Prometheus Operator ServiceMonitor,
PrometheusRule and AlertmanagerConfig) are not in those schemas: test_crds.py checks
their structure.
"""

from __future__ import annotations

import kubernetes_validate
import pytest
from k8s_helpers import OVERLAYS

K8S_VERSION = kubernetes_validate.latest_version()
CRD_GROUPS = {"postgresql.cnpg.io", "monitoring.coreos.com"}


def is_crd_object(doc: dict) -> bool:
    return doc["apiVersion"].split("/")[0] in CRD_GROUPS


def test_schemas_are_a_current_release() -> None:
    major, minor = (int(x) for x in K8S_VERSION.split(".")[:2])
    assert (major, minor) >= (1, 33)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_builtin_objects_validate_strictly(rendered, overlay: str) -> None:
    errors = []
    for doc in rendered[overlay]:
        if is_crd_object(doc):
            continue
        try:
            # strict: unknown fields are errors too (a typo is not silently dropped)
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(
                f"{doc['kind']}/{doc['metadata']['name']}: {exc.message} at {list(exc.path)}"
            )
    assert not errors, "\n".join(errors)


def test_validation_catches_a_broken_object(rendered) -> None:
    """The validator is not a no-op: a misspelt field and a wrong type are caught."""
    deployment = next(d for d in rendered["dev"] if d["kind"] == "Deployment")
    import copy

    typo = copy.deepcopy(deployment)
    typo["spec"]["template"]["spec"]["containers"][0]["imagePulPolicy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(typo, K8S_VERSION, strict=True)
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, K8S_VERSION, strict=True)


def test_only_known_custom_resources(rendered) -> None:
    kinds = {
        (d["apiVersion"], d["kind"]) for docs in rendered.values() for d in docs if is_crd_object(d)
    }
    assert kinds == {
        ("postgresql.cnpg.io/v1", "Cluster"),
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
        ("monitoring.coreos.com/v1alpha1", "AlertmanagerConfig"),
    }
