"""The object tier's own SigV4 signer (lib/objects/sigv4.py) signs exactly as AWS does:
against AWS's published S3 examples and against botocore's signer (installed with the
test server), for the requests the tier makes. The test server does not verify
signatures, so these tests are what would catch a signer that MinIO or AWS refuses."""

from __future__ import annotations

import datetime as dt
from urllib.parse import parse_qsl, urlsplit

import pytest

from lib.errors import ConfigError
from lib.objects.sigv4 import EMPTY_SHA256, Credentials, canonical_path, canonical_query, presign, sign

# AWS's documentation example ("Signature Calculations for the Authorization Header",
# "Authenticating Requests: Using Query Parameters").
AWS_EXAMPLE = Credentials("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "us-east-1")
AWS_DATE = dt.datetime(2013, 5, 24, tzinfo=dt.UTC)
HOST = "127.0.0.1:9000"


def test_the_aws_documented_get_object_example() -> None:
    headers = sign(
        AWS_EXAMPLE, "GET", "examplebucket.s3.amazonaws.com", "/test.txt",
        headers={"Range": "bytes=0-9"}, payload_sha256=EMPTY_SHA256, now=AWS_DATE,
    )  # fmt: skip
    assert headers["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )


def test_the_aws_documented_presigned_url_example() -> None:
    query = presign(AWS_EXAMPLE, "GET", "examplebucket.s3.amazonaws.com", "/test.txt", 86400, now=AWS_DATE)
    assert query.endswith("&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404")


def _botocore_headers(
    method: str, url: str, headers: dict[str, str], body: bytes, creds: Credentials
) -> dict[str, str]:
    botocore = pytest.importorskip("botocore")
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    del botocore
    request = AWSRequest(method=method, url=url, data=body, headers=dict(headers))
    S3SigV4Auth(BotoCredentials(creds.access_key, creds.secret_key, creds.session_token), "s3", creds.region).add_auth(
        request
    )
    return {k.lower(): v for k, v in request.headers.items()}


@pytest.mark.parametrize(
    ("method", "path", "params", "headers", "body"),
    [
        ("GET", "/tts-cache/prod/a/0123456789abcdef0123456789abcdef", {}, {}, b""),
        (
            "PUT",
            "/tts-cache/prod/a/0123456789abcdef0123456789abcdef",
            {},
            {"content-type": "application/octet-stream", "x-amz-meta-expires": "1796141789.5"},
            b"TTSA entry",
        ),
        ("PUT", "/tts-cache/l/0123456789abcdef0123456789abcdef", {}, {"if-none-match": "*"}, b'{"token": "t"}'),
        ("GET", "/tts-cache", {"list-type": "2", "prefix": "prod/t/dG9uZTp0b25lLTE/", "start-after": "x y"}, {}, b""),
        ("POST", "/tts-cache", {"delete": ""}, {"content-md5": "1B2M2Y8AsgTpgAmY7PhCfg=="}, b"<Delete/>"),
    ],
)
def test_requests_are_signed_as_botocore_signs_them(
    monkeypatch: pytest.MonkeyPatch, method: str, path: str, params: dict[str, str], headers: dict[str, str],
    body: bytes,
) -> None:  # fmt: skip
    now = dt.datetime(2026, 3, 1, 12, 30, 5, tzinfo=dt.UTC)
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: now.replace(tzinfo=None))
    creds = Credentials("AKIDTEST", "secret/with+chars", "eu-west-3", session_token="token==")
    import hashlib

    ours = sign(creds, method, HOST, path, params, headers, hashlib.sha256(body).hexdigest(), now=now)
    query = canonical_query(params)
    url = f"http://{HOST}{canonical_path(path)}" + (f"?{query}" if query else "")
    theirs = _botocore_headers(method, url, headers, body, creds)
    assert ours["authorization"].replace(" ", "") == theirs["authorization"].replace(" ", "")
    assert ours["x-amz-security-token"] == theirs["x-amz-security-token"]


def test_presigned_urls_match_botocore(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("botocore")
    from botocore.auth import S3SigV4QueryAuth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    now = dt.datetime(2026, 3, 1, 12, 30, 5, tzinfo=dt.UTC)
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: now.replace(tzinfo=None))
    creds = Credentials("AKIDTEST", "secret", "us-east-1")
    path = "/tts-cache/prod/p/0123456789abcdef0123456789abcdef.wav"
    ours = dict(parse_qsl(presign(creds, "GET", HOST, path, 600, now=now)))
    request = AWSRequest(method="GET", url=f"http://{HOST}{path}")
    S3SigV4QueryAuth(BotoCredentials("AKIDTEST", "secret"), "s3", "us-east-1", expires=600).add_auth(request)
    theirs = dict(parse_qsl(urlsplit(request.url).query))
    assert ours == theirs


def test_credentials_come_from_the_standard_variables_and_hide_the_secret() -> None:
    creds = Credentials.from_env(
        {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "very-secret", "AWS_DEFAULT_REGION": "eu-central-1"}
    )
    assert (creds.access_key, creds.region) == ("AKID", "eu-central-1")
    assert "very-secret" not in repr(creds)
    with pytest.raises(ConfigError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        Credentials.from_env({"AWS_ACCESS_KEY_ID": "AKID"})
