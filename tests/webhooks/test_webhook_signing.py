"""X-Registry-Signature: what a receiver needs to verify a call came from the registry."""

from __future__ import annotations

import hashlib
import hmac

from registry.webhooks import sign, verify

BODY = b'{"city":"Paris"}'


def test_sign_format_matches_a_recomputation() -> None:
    header = sign("s3cret", BODY, timestamp=1_700_000_000)
    expected = hmac.new(b"s3cret", b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"
    assert sign(b"s3cret", BODY, timestamp=1_700_000_000) == header


def test_verify_accepts_a_fresh_signature() -> None:
    header = sign("s3cret", BODY, timestamp=1000)
    assert verify("s3cret", BODY, header, now=1000)
    assert verify(b"s3cret", BODY, header, now=1000 + 300)


def test_verify_rejects_wrong_secret_tampered_body_and_stale_timestamps() -> None:
    header = sign("s3cret", BODY, timestamp=1000)
    assert not verify("other", BODY, header, now=1000)
    assert not verify("s3cret", BODY + b" ", header, now=1000)
    assert not verify("s3cret", BODY, header, now=1000 + 301)
    assert not verify("s3cret", BODY, header, now=1000 - 301)
    assert verify("s3cret", BODY, header, tolerance_s=10_000, now=5000)


def test_verify_rejects_malformed_headers_without_raising() -> None:
    for header in [None, "", "garbage", "t=abc,v1=00", "v1=00", "t=1000", "t=1000,v1", "t=1000,v1=zz"]:
        assert not verify("s3cret", BODY, header, now=1000)


def test_verify_accepts_any_of_several_v1_entries_for_secret_rotation() -> None:
    new = sign("new", BODY, timestamp=1000)
    old_digest = sign("old", BODY, timestamp=1000).split("v1=")[1]
    header = f"{new},v1={old_digest}"
    assert verify("new", BODY, header, now=1000)
    assert verify("old", BODY, header, now=1000)
    assert not verify("neither", BODY, header, now=1000)


def test_sign_defaults_to_now() -> None:
    assert verify("k", BODY, sign("k", BODY))
