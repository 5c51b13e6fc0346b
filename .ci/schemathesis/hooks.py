"""Schemathesis hooks for the hub: sign report bodies the way Flux's generic-hmac Provider does.

The OpenAPI document declares an `hmacSignature` API-key scheme on the `X-Signature` header.
schemathesis.toml gives that scheme the placeholder value `sign-me`; just before each request
is sent, the placeholder is replaced by `sha256=<hex HMAC-SHA256 of the exact body bytes>`
with the hub's webhook secret (KALYPSO_SCHEMATHESIS_SECRET). A request sent without the
header (the `ignored_auth` check removes it) stays unsigned, so the hub must refuse it.
"""

import hashlib
import hmac
import os

import requests
import schemathesis

PLACEHOLDER = "sign-me"


class SignBody(requests.auth.AuthBase):
    """Replaces the placeholder signature with the body's HMAC, once the body is final."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        if request.headers.get("X-Signature") == PLACEHOLDER:
            body = request.body or b""
            if isinstance(body, str):
                body = body.encode("utf-8")
            digest = hmac.new(self.secret, body, hashlib.sha256).hexdigest()
            request.headers["X-Signature"] = f"sha256={digest}"
        return request


@schemathesis.hook
def before_call(context, case, kwargs):
    kwargs["auth"] = SignBody(os.environ["KALYPSO_SCHEMATHESIS_SECRET"].encode("utf-8"))
