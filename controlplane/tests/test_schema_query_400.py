"""The OpenAPI schema lists the 400 of a query string (an unknown key on a read or a write, a
parameter given twice, a format no renderer answers in) on every operation that needs
credentials, with the flat ``ValidationError`` body (controlplane.api.postprocess_auth_errors)."""
import pytest

METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


@pytest.mark.django_db
def test_every_operation_that_needs_credentials_lists_a_400(viewer_api):
    schema = viewer_api.get("/api/schema/?format=json").json()
    operations = [(path, method, op) for path, item in schema["paths"].items()
                  for method, op in item.items() if method in METHODS and op.get("security")
                  and {} not in op["security"]]
    assert len(operations) > 30
    for path, method, op in operations:
        bad = op["responses"].get("400")
        assert bad, (path, method)
        assert bad["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ValidationError"}
    create = schema["paths"]["/api/recipes/"]["post"]["responses"]["400"]
    assert create["description"]   # the recipe create documents its own 400, kept as it was
    retrieve = schema["paths"]["/api/recipes/{id}/"]["get"]["responses"]["400"]
    assert "unknown field 'dry'; allowed: format" in retrieve["description"]
