"""OAuth 2.0 protected-resource metadata (RFC 9728), as the MCP authorization spec asks for.

With single sign-on configured, an MCP client that gets a 401 follows the ``resource_metadata``
URL of its ``WWW-Authenticate`` header (or looks here on its own) to learn which authorization
server issues tokens for this registry, then gets one there. The documents are served at
``/.well-known/oauth-protected-resource/mcp`` (for the ``/mcp`` resource, the path RFC 9728
derives from it) and at ``/.well-known/oauth-protected-resource`` (clients that try the root);
both describe ``<base>/mcp``. Without single sign-on there is nothing to point at: 404.

They are discovery documents for OAuth clients, not admin-API operations, so ``/openapi.json``
leaves them out (the shape is still the ``ProtectedResource`` model below).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from registry.api.deps import SettingsDep
from registry.api.problems import documented
from registry.catalog.errors import NotFound
from registry.oidc import MCP_METADATA_PATH, METADATA_PATH, public_base

router = APIRouter()


class ProtectedResource(BaseModel):
    """RFC 9728 section 2: what this resource is and who issues tokens for it."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "resource": "https://registry.example.com/mcp",
                    "authorization_servers": ["https://login.example.com/realms/corp"],
                    "bearer_methods_supported": ["header"],
                    "scopes_supported": ["openid", "profile", "email"],
                    "resource_name": "mcp-registry",
                }
            ]
        }
    )

    resource: str = Field(description="The protected resource: this server's MCP endpoint")
    authorization_servers: list[str] = Field(description="The OpenID Connect issuer (REGISTRY_OIDC_ISSUER)")
    bearer_methods_supported: list[str] = Field(description="Tokens are sent in the Authorization header only")
    scopes_supported: list[str] = Field(description="Scopes to ask the issuer for (REGISTRY_OIDC_SCOPES)")
    resource_name: str


@router.get(
    METADATA_PATH,
    tags=["oauth"],
    summary="Protected-resource metadata at the root (RFC 9728; single sign-on only)",
    operation_id="getResourceMetadata",
    response_model=ProtectedResource,
    responses=documented(404),
    include_in_schema=False,
)
@router.get(
    MCP_METADATA_PATH,
    tags=["oauth"],
    summary="Protected-resource metadata of the MCP endpoint (RFC 9728; single sign-on only)",
    operation_id="getMcpResourceMetadata",
    response_model=ProtectedResource,
    responses=documented(404),
    include_in_schema=False,
)
def resource_metadata(request: Request, settings: SettingsDep) -> ProtectedResource:
    """The same document at both paths (see the module docstring)."""
    if not settings.oidc_issuer:
        raise NotFound("single sign-on is not configured on this server (REGISTRY_OIDC_ISSUER), so it has no metadata")
    if not settings.oidc_bearer_enabled:
        raise NotFound(
            "this server accepts no single sign-on bearer tokens (REGISTRY_OIDC_AUDIENCE is not set), so it has "
            "no metadata"
        )
    base = public_base(settings, request.url.scheme, request.headers.get("host"))
    return ProtectedResource(
        resource=f"{base}/mcp",
        authorization_servers=[settings.oidc_issuer],
        bearer_methods_supported=["header"],
        scopes_supported=settings.oidc_scopes.split(),
        resource_name="mcp-registry",
    )
