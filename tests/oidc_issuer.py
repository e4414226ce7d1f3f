"""A small but real OpenID Connect issuer for the single sign-on tests, on a loopback port.

``TestIssuer`` runs ``http.server`` in a thread and serves what the registry asks an issuer for:

- ``/.well-known/openid-configuration``: discovery (its ``issuer`` is this server's URL);
- ``/jwks``: the public halves of its signing keys (RSA, or EC P-256 on request), which tests add
  and remove while the registry runs (key rotation);
- ``/authorize``: approves the configured test user at once (no login page) and redirects back to
  the ``redirect_uri`` with a one-time code and the ``state``; PKCE (S256) is required;
- ``/token``: trades a code for an ID token and an access token, checking the client (and its
  secret, when one is configured: HTTP Basic or in the form), the ``redirect_uri`` and the PKCE
  verifier, as a real issuer does.

``mint(...)`` signs any JWT the tests need: custom claims, expired, not yet valid, for another
audience or issuer, with a key the JWKS does not list, or (``mint_hs256_with_public_key``) the
"algorithm confusion" forgery that signs HS256 with the public key as the HMAC secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tests.serve_process import free_port

#: Claims of the user ``/authorize`` signs in (tests change ``issuer.user``).
DEFAULT_USER: dict[str, Any] = {
    "sub": "user-alice",
    "email": "alice@example.test",
    "registry_role": "editor",
    "groups": ["payments:editor"],
}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class Grant:
    """An issued authorization code, waiting for ``/token``."""

    client_id: str
    redirect_uri: str
    code_challenge: str
    nonce: str | None
    claims: dict[str, Any]
    issued_at: float = field(default_factory=time.monotonic)


class TestIssuer:
    """An OIDC issuer on ``http://127.0.0.1:<port>``; use as a context manager."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        *,
        client_id: str = "registry-ui",
        client_secret: str | None = None,
        audience: str = "mcp-registry",
        user: Mapping[str, Any] | None = None,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.client_id = client_id
        self.client_secret = client_secret
        #: The ``aud`` of the access tokens ``/token`` issues.
        self.audience = audience
        self.user: dict[str, Any] = dict(user or DEFAULT_USER)
        #: ``/authorize`` answers this OAuth error instead of a code, when set.
        self.deny: str | None = None
        self.keys: dict[str, Any] = {}
        self.signing_kid = self.add_key()
        self.codes: dict[str, Grant] = {}
        self.jwks_fetches = 0
        self.discovery_fetches = 0
        #: How each ``/token`` request authenticated its client: "basic", "post" or "none".
        self.token_auth: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, name="test-issuer", daemon=True)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ keys
    def add_key(self, kind: str = "RSA", *, current: bool = False) -> str:
        """A new signing key (published in the JWKS); ``current``: sign new tokens with it."""
        kid = f"{kind.lower()}-{secrets.token_hex(4)}"
        if kind == "RSA":
            self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        elif kind == "EC":
            self.keys[kid] = ec.generate_private_key(ec.SECP256R1())
        else:
            raise ValueError(kind)
        if current:
            self.signing_kid = kid
        return kid

    def remove_key(self, kid: str) -> None:
        del self.keys[kid]

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, key in list(self.keys.items()):
            if isinstance(key, rsa.RSAPrivateKey):
                jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
            else:
                jwk = json.loads(ECAlgorithm.to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "use": "sig"})
        return {"keys": keys}

    @staticmethod
    def _algorithm(key: Any) -> str:
        return "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"

    # ------------------------------------------------------------------ tokens
    def claims(self, **overrides: Any) -> dict[str, Any]:
        """An access token's claims for the test user, valid for five minutes; ``overrides``
        replace claims (a value of None removes one). Each carries its own ``jti``, as a real
        issuer's do: two tokens minted within one second are never the same string, so the
        server's cache of verified tokens cannot answer for a token a test meant to be new."""
        now = int(time.time())
        claims: dict[str, Any] = {
            **self.user,
            "iss": self.url,
            "aud": self.audience,
            "iat": now,
            "nbf": now,
            "exp": now + 300,
            "jti": secrets.token_hex(8),
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def mint(
        self,
        claims: Mapping[str, Any] | None = None,
        *,
        kid: str | None = None,
        key: Any = None,
        algorithm: str | None = None,
        headers: Mapping[str, Any] | None = None,
        **overrides: Any,
    ) -> str:
        """A signed JWT: ``claims`` (default: ``self.claims(**overrides)``), signed with the key
        ``kid`` (default: the current one) or with ``key`` (a private key the JWKS need not list)."""
        body = dict(claims) if claims is not None else self.claims(**overrides)
        kid = kid or self.signing_kid
        signer = key if key is not None else self.keys[kid]
        header = {"kid": kid, **(headers or {})}
        return jwt.encode(body, signer, algorithm=algorithm or self._algorithm(signer), headers=header)

    def mint_hs256_with_public_key(self, **overrides: Any) -> str:
        """The algorithm-confusion forgery: HS256 "signed" with the issuer's public key (PEM) as
        the HMAC secret, which a verifier that trusts the header's ``alg`` would accept."""
        public = self.keys[self.signing_kid].public_key()
        secret = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        header = {"alg": "HS256", "typ": "JWT", "kid": self.signing_kid}
        signing_input = (
            b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(self.claims(**overrides)).encode())
        )
        signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
        return signing_input + "." + b64url(signature)

    def unsigned(self, **overrides: Any) -> str:
        """``alg: none``: no signature at all."""
        header = {"alg": "none", "typ": "JWT"}
        return b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(self.claims(**overrides)).encode()) + "."

    # ------------------------------------------------------------------ endpoints
    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "jwks_uri": f"{self.url}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256", "ES256"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post", "none"],
        }

    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        redirect_uri = query.get("redirect_uri", "")
        parts = urlsplit(redirect_uri)
        if query.get("client_id") != self.client_id or parts.scheme not in ("http", "https"):
            return 400, {"Content-Type": "text/plain"}, b"unknown client or redirect_uri"
        answer: dict[str, str] = {}
        if "state" in query:
            answer["state"] = query["state"]
        if self.deny:
            answer["error"] = self.deny
        elif query.get("response_type") != "code":
            answer["error"] = "unsupported_response_type"
        elif query.get("code_challenge_method") != "S256" or not query.get("code_challenge"):
            answer["error"] = "invalid_request"
        else:
            code = secrets.token_urlsafe(24)
            with self._lock:
                self.codes[code] = Grant(
                    self.client_id, redirect_uri, query["code_challenge"], query.get("nonce"), dict(self.user)
                )
            answer["code"] = code
        separator = "&" if parts.query else "?"
        return 302, {"Location": redirect_uri + separator + urlencode(answer)}, b""

    def token(self, form: dict[str, str], authorization: str | None) -> tuple[int, dict[str, Any]]:
        client_id, secret, how = form.get("client_id"), form.get("client_secret"), "post"
        if authorization and authorization.lower().startswith("basic "):
            decoded = base64.b64decode(authorization[6:]).decode()
            user, _, password = decoded.partition(":")
            client_id, secret, how = unquote(user), unquote(password), "basic"
        elif secret is None:
            how = "none"
        self.token_auth.append(how)
        if client_id != self.client_id:
            return 401, {"error": "invalid_client"}
        if self.client_secret is not None and secret != self.client_secret:
            return 401, {"error": "invalid_client"}
        if form.get("grant_type") != "authorization_code":
            return 400, {"error": "unsupported_grant_type"}
        with self._lock:
            grant = self.codes.pop(form.get("code", ""), None)
        if grant is None or time.monotonic() - grant.issued_at > 60:
            return 400, {"error": "invalid_grant"}
        if form.get("redirect_uri") != grant.redirect_uri or form.get("client_id", client_id) != grant.client_id:
            return 400, {"error": "invalid_grant"}
        verifier = form.get("code_verifier", "")
        if b64url(hashlib.sha256(verifier.encode()).digest()) != grant.code_challenge:
            return 400, {"error": "invalid_grant"}
        now = int(time.time())
        id_claims = {
            **grant.claims,
            "iss": self.url,
            "aud": self.client_id,
            "azp": self.client_id,
            "iat": now,
            "exp": now + 300,
            "auth_time": now,
        }
        if grant.nonce is not None:
            id_claims["nonce"] = grant.nonce
        return 200, {
            "token_type": "Bearer",
            "expires_in": 300,
            "id_token": self.mint(id_claims),
            "access_token": self.mint(self.claims(**grant.claims)),
        }


def _handler(issuer: TestIssuer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: bytes, headers: Mapping[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, document: Any) -> None:
            self._send(status, json.dumps(document).encode(), {"Content-Type": "application/json"})

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            if parts.path == "/.well-known/openid-configuration":
                issuer.discovery_fetches += 1
                self._json(200, issuer.discovery())
            elif parts.path == "/jwks":
                issuer.jwks_fetches += 1
                self._json(200, issuer.jwks())
            elif parts.path == "/authorize":
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                status, headers, body = issuer.authorize(query)
                self._send(status, body, headers)
            else:
                self._json(404, {"error": "not_found"})

        def do_POST(self) -> None:
            if urlsplit(self.path).path != "/token":
                self._json(404, {"error": "not_found"})
                return
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(min(length, 64 * 1024)).decode()
            form = {k: v[0] for k, v in parse_qs(raw).items()}
            status, answer = issuer.token(form, self.headers.get("Authorization"))
            self._json(status, answer)

    return Handler
