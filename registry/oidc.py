"""Single sign-on: bearer JWTs from one OpenID Connect issuer become principals.

``OidcVerifier`` reads the issuer's discovery document (``{issuer}/.well-known/openid-configuration``,
whose ``issuer`` must be the configured one, exactly) and its JWKS, and checks a token's
signature (asymmetric algorithms only: an ``HS256`` token "signed" with the public key, or
``alg: none``, is refused before any key is looked at), issuer, audience and times (30 s of
leeway for clocks that disagree). A bearer token (``verify``) must be an access token: meant for
``REGISTRY_OIDC_AUDIENCE`` (unset: none is accepted, single sign-on then opens the web UI only;
never the client id, which the UI's ID tokens carry), with no ``nonce`` (an ID token's mark) and
no header ``typ`` naming another kind of token (RFC 9068). The web UI's sign-in verifies ID
tokens as such (``verify_id_token``). What a token says is mapped to a ``Principal``:

- the user is the ``oidc_user_claim`` (``sub``), shown as ``oidc_name_claim`` (``email``);
- the scope is the ``oidc_role_claim`` (``registry_role``: one of ``SCOPES``, or a list, of
  which the strongest counts), else ``oidc_default_role``;
- the teams come from the ``oidc_teams_claim`` (``groups``): ``"team:role"`` strings (a bare
  ``"team"`` is a viewer) or a ``{team: role}`` object; entries that are not a valid team name
  and role (an IdP's other groups) are ignored.

Fetching is plain synchronous HTTP with short timeouts and bounded answers, so callers run
``verify`` on a worker thread (the admin API's request guard and the MCP transports do). The
discovery document and the JWKS are trusted for ``oidc_jwks_cache_s``; a token naming a key id
the JWKS does not have fetches it again at once (the issuer rotated its keys), but at most every
``oidc_jwks_min_refresh_s``, so a stream of tokens with made-up key ids cannot make the registry
hammer the issuer. When a periodic refresh fails the keys already known stay in use.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
import jwt
from jwt.algorithms import get_default_algorithms

from registry.config import LOOPBACK_HOSTS, Settings
from registry.tokens import (
    EXPIRED_TOKEN,
    MALFORMED_TOKEN,
    SCOPES,
    TEAM_PATTERN,
    TEAM_ROLES,
    Principal,
    TokenRejected,
    looks_like_jwt,
)

log = logging.getLogger("registry.oidc")

#: Signature algorithms accepted; never ``none`` nor a shared-secret (``HS*``) one.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
#: Seconds by which ``exp``, ``nbf`` and ``iat`` may be off (clocks disagree a little).
LEEWAY_S = 30
#: Longest token looked at (real ones are a few kilobytes).
TOKEN_CHARS = 16 * 1024
#: Largest discovery document, JWKS or token-endpoint answer read from the issuer.
DOCUMENT_BYTES = 512 * 1024
#: Most keys taken from one JWKS.
JWKS_KEYS = 100
#: Most team memberships taken from one token (more are ignored).
TOKEN_TEAMS = 256
#: Longest user (subject) and display name kept.
USER_CHARS = 256
NAME_CHARS = 128
#: How long one request to the issuer may take.
FETCH_TIMEOUT = httpx.Timeout(5.0, connect=3.0)

UNREACHABLE = "identity provider unreachable"
UNKNOWN_KEY = "unknown signing key"
#: A bearer JWT while ``REGISTRY_OIDC_AUDIENCE`` is unset: single sign-on opens the web UI only.
NO_AUDIENCE = (
    "single sign-on tokens are not accepted as bearer tokens on this server: it has no REGISTRY_OIDC_AUDIENCE "
    "(the audience the issuer's access tokens for this registry carry)"
)
ID_TOKEN = "an ID token is not an access token (it carries a nonce): send an access token issued for this registry"
#: Header ``typ`` values a bearer token may carry: RFC 9068's, or the generic ``JWT`` (which says
#: nothing of the kind, and is what most issuers put on their access tokens), or none.
ACCESS_TOKEN_TYPES = frozenset({"at+jwt", "application/at+jwt", "jwt"})

#: Which key types (and curves) sign with which algorithm.
_EC_CURVES = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}


#: Where RFC 9728 protected-resource metadata is served: for the MCP endpoint (``/mcp``, the
#: resource agents ask for), and at the root (clients that look there first).
METADATA_PATH = "/.well-known/oauth-protected-resource"
MCP_METADATA_PATH = METADATA_PATH + "/mcp"


def public_base(settings: Settings, scheme: str, host: str | None) -> str:
    """The server's public base URL: ``REGISTRY_PUBLIC_URL``, else the request's scheme and host."""
    if settings.public_url:
        return settings.public_url.rstrip("/")
    if not host or not _HOST.fullmatch(host):  # it lands in headers and JSON: nothing odd
        host = f"{settings.host}:{settings.port}"
    return f"{'https' if scheme in ('https', 'wss') else 'http'}://{host}"


_HOST = re.compile(r"[A-Za-z0-9.\-]{1,253}(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](:[0-9]{1,5})?")


class OidcError(Exception):
    """The issuer could not be used (unreachable, or its documents are not acceptable); the
    message is safe to show (it names no secret)."""


@dataclass(frozen=True)
class _Key:
    kid: str | None
    kty: str
    crv: str | None
    alg: str | None
    public_key: Any

    def signs(self, alg: str) -> bool:
        """Whether a token signed with ``alg`` may be checked with this key."""
        if self.alg is not None and self.alg != alg:
            return False
        if alg.startswith(("RS", "PS")):
            return self.kty == "RSA"
        if alg in _EC_CURVES:
            return self.kty == "EC" and self.crv == _EC_CURVES[alg]
        return alg == "EdDSA" and self.kty == "OKP" and self.crv in ("Ed25519", "Ed448")


_TEAM = re.compile(TEAM_PATTERN)


def check_url(url: object, what: str) -> str:
    """An http(s) URL from the issuer's discovery document."""
    if not isinstance(url, str) or len(url) > 2048:
        raise OidcError(f"the issuer's discovery document has no usable {what}")
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise OidcError(f"the issuer's {what} is not an http(s) URL")
    if parts.scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
        log.warning("the issuer's %s is plain http (%s): use https outside a test setup", what, parts.hostname)
    return url


def fetch_json(client: httpx.Client, method: str, url: str, **kwargs: Any) -> Any:
    """A JSON answer from the issuer, read up to ``DOCUMENT_BYTES``; ``OidcError`` otherwise."""
    try:
        with client.stream(method, url, **kwargs) as response:
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > DOCUMENT_BYTES:
                raise OidcError(f"the issuer's answer from {url} is larger than {DOCUMENT_BYTES} bytes")
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > DOCUMENT_BYTES:
                    raise OidcError(f"the issuer's answer from {url} is larger than {DOCUMENT_BYTES} bytes")
            status = response.status_code
    except httpx.HTTPError as exc:
        raise OidcError(f"{UNREACHABLE} ({type(exc).__name__} on {url})") from None
    try:
        document = json.loads(bytes(body))
    except ValueError:
        raise OidcError(f"the issuer's answer from {url} is not JSON (HTTP {status})") from None
    if status >= 400:
        error = document.get("error") if isinstance(document, dict) else None
        detail = f": {error}" if isinstance(error, str) and re.fullmatch(r"[a-z_]{1,64}", error) else ""
        raise OidcError(f"the issuer answered HTTP {status} from {url}{detail}")
    return document


class OidcVerifier:
    """Verifies the configured issuer's JWTs (access tokens and ID tokens); thread-safe."""

    def __init__(self, settings: Settings, *, client: httpx.Client | None = None) -> None:
        if not settings.oidc_issuer:
            raise ValueError("REGISTRY_OIDC_ISSUER is not set")
        if settings.oidc_default_role not in SCOPES:
            raise ValueError(f"REGISTRY_OIDC_DEFAULT_ROLE must be one of {', '.join(SCOPES)}")
        self.settings = settings
        self.issuer = settings.oidc_issuer
        #: The ``aud`` bearer (access) tokens must carry; None: no bearer JWT is accepted. Never
        #: defaulted to the client id: the ID tokens of the web UI's sign-in carry that audience,
        #: and an ID token is no access token.
        self.audience = settings.oidc_audience
        if not self.audience and not settings.oidc_client_id:
            raise ValueError(
                "single sign-on needs REGISTRY_OIDC_AUDIENCE (bearer tokens on the admin API and MCP) and/or "
                "REGISTRY_OIDC_CLIENT_ID (the web UI's sign-in)"
            )
        if not self.audience:
            log.warning(
                "REGISTRY_OIDC_AUDIENCE is not set: single sign-on signs people in to the web UI only, and bearer "
                "JWTs on the admin API and MCP are refused; set it to the audience of the issuer's access tokens "
                "for this registry to accept them"
            )
        elif self.audience == settings.oidc_client_id:
            log.warning(
                "REGISTRY_OIDC_AUDIENCE is the web UI's client id, which ID tokens carry too: they are still "
                "refused as bearer tokens (by their nonce and type), but give access tokens an audience of their own"
            )
        self.client = client or httpx.Client(timeout=FETCH_TIMEOUT, follow_redirects=False)
        self._lock = threading.RLock()  # metadata() is also called under it
        self._metadata: dict[str, Any] | None = None
        self._metadata_at = 0.0
        self._keys: tuple[_Key, ...] = ()
        self._keys_at = 0.0
        #: When the JWKS was last asked for (successfully or not): the rotation rate limit.
        self._keys_tried_at = -float("inf")
        self._keys_error: str | None = None

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ issuer documents
    def metadata(self) -> dict[str, Any]:
        """The issuer's discovery document (cached ``oidc_jwks_cache_s``); ``OidcError`` if it
        cannot be had and none was had before."""
        now = time.monotonic()
        if self._metadata is not None and now - self._metadata_at < self.settings.oidc_jwks_cache_s:
            return self._metadata
        with self._lock:
            if self._metadata is not None and time.monotonic() - self._metadata_at < self.settings.oidc_jwks_cache_s:
                return self._metadata
            try:
                self._metadata = self._fetch_metadata()
            except OidcError:
                if self._metadata is None:
                    raise
                log.warning("could not refresh the issuer's discovery document; keeping the one read before")
            self._metadata_at = time.monotonic()
            return self._metadata

    def _fetch_metadata(self) -> dict[str, Any]:
        url = self.issuer.rstrip("/") + "/.well-known/openid-configuration"
        document = fetch_json(self.client, "GET", url)
        if not isinstance(document, dict):
            raise OidcError("the issuer's discovery document is not a JSON object")
        if document.get("issuer") != self.issuer:
            raise OidcError(
                f"the discovery document at {url} names another issuer than REGISTRY_OIDC_ISSUER ({self.issuer})"
            )
        check_url(document.get("jwks_uri"), "jwks_uri")
        return document

    def _refresh_keys(self) -> None:
        """Fetch the JWKS again (under the lock), at most every ``oidc_jwks_min_refresh_s``
        (whether the last try worked or not: an unreachable issuer is not asked on every request)."""
        now = time.monotonic()
        if now - self._keys_tried_at < self.settings.oidc_jwks_min_refresh_s:
            return
        self._keys_tried_at = now
        try:
            metadata = self.metadata()
            document = fetch_json(self.client, "GET", metadata["jwks_uri"])
            keys = _parse_jwks(document)
        except OidcError as exc:
            self._keys_error = str(exc)
            log.warning("could not fetch the issuer's signing keys: %s", exc)
            return
        self._keys, self._keys_at, self._keys_error = keys, time.monotonic(), None

    def _key_for(self, kid: str | None, alg: str) -> _Key:
        if not self._keys:
            with self._lock:
                if not self._keys:
                    self._refresh_keys()
        elif time.monotonic() - self._keys_at >= self.settings.oidc_jwks_cache_s and self._lock.acquire(blocking=False):
            # Time for a periodic refresh: one thread fetches, the others go on with the keys known.
            try:
                if time.monotonic() - self._keys_at >= self.settings.oidc_jwks_cache_s:
                    self._refresh_keys()
            finally:
                self._lock.release()
        key = _pick(self._keys, kid, alg)
        if key is None:
            with self._lock:  # the issuer may have rotated its keys: look once more
                key = _pick(self._keys, kid, alg)
                if key is None:
                    self._refresh_keys()
                    key = _pick(self._keys, kid, alg)
        if key is None:
            if not self._keys and self._keys_error is not None:
                raise TokenRejected(UNREACHABLE)
            raise TokenRejected(UNKNOWN_KEY)
        return key

    # ------------------------------------------------------------------ tokens
    def decode(self, token: str, *, audience: str) -> dict[str, Any]:
        """The claims of a token signed by the issuer and meant for ``audience``;
        ``TokenRejected`` saying why not."""
        if len(token) > TOKEN_CHARS:
            raise TokenRejected(f"token longer than {TOKEN_CHARS} characters")
        if not looks_like_jwt(token):
            raise TokenRejected(MALFORMED_TOKEN)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise TokenRejected(MALFORMED_TOKEN) from None
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            shown = alg if isinstance(alg, str) and re.fullmatch(r"[A-Za-z0-9]{1,16}", alg) else "?"
            raise TokenRejected(f"signing algorithm {shown} not accepted (use one of {', '.join(ALGORITHMS)})")
        kid = header.get("kid")
        if kid is not None and (not isinstance(kid, str) or len(kid) > 256):
            raise TokenRejected(MALFORMED_TOKEN)
        key = self._key_for(kid, alg)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key.public_key,
                algorithms=[alg],
                audience=audience,
                issuer=self.issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise TokenRejected(EXPIRED_TOKEN) from None
        except jwt.ImmatureSignatureError:
            raise TokenRejected("token not valid yet") from None
        except jwt.InvalidAudienceError:
            raise TokenRejected("wrong audience") from None
        except jwt.InvalidIssuerError:
            raise TokenRejected("wrong issuer") from None
        except jwt.InvalidSignatureError:
            raise TokenRejected("invalid signature") from None
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRejected(f"token lacks the {exc.claim!r} claim") from None
        except jwt.InvalidIssuedAtError:
            raise TokenRejected("token has an invalid 'iat' claim") from None
        except jwt.PyJWTError:
            raise TokenRejected(MALFORMED_TOKEN) from None
        return claims

    def verify(self, token: str) -> Principal:
        """The principal of an access token the issuer signed for this registry (a bearer token on
        the admin API, MCP, or pasted into the web UI's sign-in). Only an access token: it must
        carry ``REGISTRY_OIDC_AUDIENCE`` (none set: refused), no ``nonce`` (which marks an ID
        token), and a header ``typ`` that is absent, ``JWT`` or RFC 9068's ``at+jwt``."""
        if not self.audience:
            raise TokenRejected(NO_AUDIENCE)
        claims = self.decode(token, audience=self.audience)
        typ = jwt.get_unverified_header(token).get("typ")  # signed with the rest: checked by decode
        if typ is not None and (not isinstance(typ, str) or typ.lower() not in ACCESS_TOKEN_TYPES):
            shown = typ if isinstance(typ, str) and re.fullmatch(r"[A-Za-z0-9+./-]{1,32}", typ) else "?"
            raise TokenRejected(f"a token of type {shown} is not an access token (RFC 9068: at+jwt)")
        if "nonce" in claims:
            raise TokenRejected(ID_TOKEN)
        return self.principal(claims)

    def verify_id_token(self, id_token: str, nonce: str) -> Principal:
        """The principal of an ID token from the web UI's sign-in: meant for the UI's client,
        carrying the ``nonce`` this sign-in sent."""
        client_id = self.settings.oidc_client_id
        if not client_id:
            raise TokenRejected("single sign-on for the web UI is not configured (REGISTRY_OIDC_CLIENT_ID)")
        claims = self.decode(id_token, audience=client_id)
        sent = claims.get("nonce")
        if not isinstance(sent, str) or not _same(sent, nonce):
            raise TokenRejected("the ID token does not carry this sign-in's nonce")
        audiences = claims.get("aud")
        if isinstance(audiences, list) and len(audiences) > 1 and claims.get("azp") not in (None, client_id):
            raise TokenRejected("wrong audience")
        return self.principal(claims)

    def principal(self, claims: Mapping[str, Any]) -> Principal:
        """What the registry makes of a verified token's claims."""
        settings = self.settings
        user = claims.get(settings.oidc_user_claim)
        if isinstance(user, int) and not isinstance(user, bool):
            user = str(user)
        if not isinstance(user, str) or not user.strip() or len(user) > USER_CHARS:
            raise TokenRejected(f"token lacks the {settings.oidc_user_claim!r} claim")
        name = claims.get(settings.oidc_name_claim)
        if not isinstance(name, str) or not name.strip():
            name = user
        exp = claims.get("exp")
        expires_at = datetime.fromtimestamp(exp, UTC) if isinstance(exp, int | float) else None
        return Principal(
            token_id=None,
            name=name.strip()[:NAME_CHARS],
            scopes=frozenset({_role(claims.get(settings.oidc_role_claim), settings.oidc_default_role)}),
            expires_at=expires_at,
            teams=_teams(claims.get(settings.oidc_teams_claim)),
            user=user,
        )


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def _role(value: object, default: str) -> str:
    """The role claim's scope: a scope name, or the strongest scope in a list; else ``default``."""
    if isinstance(value, str) and value in SCOPES:
        return value
    if isinstance(value, list):
        present = {item for item in value[:TOKEN_TEAMS] if isinstance(item, str)}
        return next((scope for scope in SCOPES if scope in present), default)
    return default


def _teams(value: object) -> tuple[tuple[str, str], ...]:
    """Team memberships from the teams claim, the strongest role per team; invalid entries ignored."""
    pairs: list[tuple[object, object]] = []
    if isinstance(value, Mapping):
        pairs = list(value.items())[:TOKEN_TEAMS]
    elif isinstance(value, list):
        for item in value[:TOKEN_TEAMS]:
            if isinstance(item, str):
                name, _, held = item.partition(":")
                pairs.append((name, held or "viewer"))
    rank = {role: index for index, role in enumerate(TEAM_ROLES)}
    teams: dict[str, str] = {}
    for team, role in pairs:
        if not isinstance(team, str) or not isinstance(role, str) or role not in rank or not _TEAM.fullmatch(team):
            continue
        if team not in teams or rank[role] > rank[teams[team]]:
            teams[team] = role
    return tuple(sorted(teams.items()))


def _parse_jwks(document: object) -> tuple[_Key, ...]:
    """The signing keys of a JWKS (symmetric, encryption-only and unreadable keys skipped)."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise OidcError("the issuer's JWKS has no key list")
    algorithms = get_default_algorithms()
    keys: list[_Key] = []
    for jwk in document["keys"][:JWKS_KEYS]:
        if not isinstance(jwk, dict) or jwk.get("use", "sig") != "sig":
            continue
        kty, crv, alg, kid = jwk.get("kty"), jwk.get("crv"), jwk.get("alg"), jwk.get("kid")
        if not isinstance(kty, str) or (alg is not None and alg not in ALGORITHMS):
            continue
        curve_alg = {curve: name for name, curve in _EC_CURVES.items()}.get(crv) if isinstance(crv, str) else None
        family = {"RSA": "RS256", "EC": curve_alg, "OKP": "EdDSA"}.get(kty)
        if family is None:
            continue
        try:
            public_key = algorithms[family].from_jwk(jwk)
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            log.warning("skipping an unreadable key %r in the issuer's JWKS", kid)
            continue
        if hasattr(public_key, "private_bytes"):  # a private key published by mistake: use its public half
            public_key = public_key.public_key()
        keys.append(
            _Key(kid if isinstance(kid, str) else None, kty, crv if isinstance(crv, str) else None, alg, public_key)
        )
    return tuple(keys)


def _pick(keys: tuple[_Key, ...], kid: str | None, alg: str) -> _Key | None:
    """The key a token names (by ``kid``); without one, the only key that signs with ``alg``."""
    if kid is not None:
        return next((key for key in keys if key.kid == kid and key.signs(alg)), None)
    candidates = [key for key in keys if key.signs(alg)]
    return candidates[0] if len(candidates) == 1 else None
