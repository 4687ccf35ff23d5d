"""An S3-compatible bucket (AWS, MinIO, Ceph …) under a prefix, through boto3.

Credentials come from ``RAGDESK_SOURCE_CREDENTIALS`` by the name the source gives; without
a name the bucket is read anonymously (unsigned requests). Never from boto3's own chain
(``AWS_ACCESS_KEY_ID``, ``~/.aws``, the instance role): the endpoint is the admin's to
choose, and the server's own keys would be sent to it. They are handed to boto3 and to
nothing else: errors are told with any secret blanked out.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from app.config.settings.ingest import SourceCredential
from app.sources.readers import Entry, SourceUnavailable, TooLarge, hidden, unsafe_key
from retrieval.s3_blobs import quiet_boto_logs

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


class S3Reader:
    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        credential: SourceCredential | None = None,
    ):
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        self.region = region
        self.credential = credential
        self._client: S3Client | None = None

    def entries(self) -> Iterator[Entry]:
        try:
            pages = (
                self.client()
                .get_paginator("list_objects_v2")
                .paginate(Bucket=self.bucket, Prefix=self.prefix)
            )
            for page in pages:
                for item in page.get("Contents", []):
                    entry = self._entry(item)
                    if entry is not None:
                        yield entry
        except SourceUnavailable:
            raise
        except Exception as exc:  # botocore's ClientError, connection errors, …
            raise SourceUnavailable(self.tell(exc)) from None

    def read(self, entry: Entry, max_bytes: int) -> bytes:
        if entry.size > max_bytes:
            raise TooLarge(f"larger than the upload limit ({max_bytes} bytes)")
        try:
            body = self.client().get_object(Bucket=self.bucket, Key=entry.path)["Body"]
            data: bytes = body.read(max_bytes + 1)
            body.close()
        except Exception as exc:
            raise OSError(self.tell(exc)) from None
        if len(data) > max_bytes:
            raise TooLarge(f"larger than the upload limit ({max_bytes} bytes)")
        return data

    def client(self) -> S3Client:
        if self._client is None:
            import boto3.session  # on use: the server starts without it when no bucket syncs
            import botocore.session
            from botocore import UNSIGNED
            from botocore.config import Config
            from botocore.credentials import CredentialResolver

            quiet_boto_logs()
            session = botocore.session.Session()
            # No ambient credentials: boto3 finds none but the source's own (below).
            session.register_component("credential_provider", CredentialResolver(providers=[]))
            keys: dict[str, Any] = {}
            signing: dict[str, Any] = {"signature_version": UNSIGNED}  # anonymous
            if self.credential is not None:
                c = self.credential
                keys = {
                    "aws_access_key_id": c.access_key_id.get_secret_value(),
                    "aws_secret_access_key": c.secret_access_key.get_secret_value(),
                    "aws_session_token": c.session_token.get_secret_value()
                    if c.session_token
                    else None,
                }
                signing = {}
            config = Config(
                connect_timeout=10, read_timeout=60, retries={"max_attempts": 3}, **signing
            )
            self._client = boto3.session.Session(botocore_session=session).client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=self.region or "us-east-1",
                config=config,
                **keys,
            )
        return self._client

    def tell(self, exc: Exception) -> str:
        """The error in words, every secret of the credential blanked out."""
        text = f"{type(exc).__name__}: {exc}"
        if self.credential is not None:
            c = self.credential
            for secret in (c.access_key_id, c.secret_access_key, c.session_token):
                if secret is not None and secret.get_secret_value():
                    text = text.replace(secret.get_secret_value(), "***")
        return text

    def _entry(self, item: Any) -> Entry | None:
        key = str(item["Key"])
        relative = key[len(self.prefix) :]
        if key.endswith("/") or not relative:
            return None  # "folder" markers are not documents
        reason = unsafe_key(relative)
        if reason is not None:
            return Entry(key, refused=reason)
        if hidden(relative):
            return None  # nor are dot files
        modified = item.get("LastModified")
        stamp = modified.timestamp() if modified is not None else 0
        return Entry(key, size=int(item.get("Size", 0)), version=f"{item.get('ETag')}:{stamp}")
