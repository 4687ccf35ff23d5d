"""Uploaded originals in an S3-compatible bucket (AWS, MinIO, Ceph …), for several servers
sharing one library: ``s3://bucket/prefix`` holds ``<prefix>/<hash[:2]>/<hash>``.

One PUT is atomic (an object is there whole or not at all), and servers putting the same
content at once put the same bytes, so all succeed. Every call has short timeouts and one
retry: an unreachable or slow bucket is ``BlobsUnavailable`` within seconds, never a hang.
The keys (when given; else boto3's own chain: an instance or pod role) are handed to boto3
and to nothing else: every error is told with them blanked out, and botocore's request
logs (DEBUG) are kept quiet.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Container, Iterator
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from retrieval.blobs import SWEEP_GRACE_S, BlobsUnavailable, Reachability, check_stored_name
from retrieval.uploads import content_hash

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 30.0  # between two reads of a socket, not for a whole transfer
ATTEMPTS = 2  # the first try and one retry
PROBE_TIMEOUT_S = 3.0  # readiness's check: one try
# botocore logs every signed request at DEBUG, session token included: never below INFO.
QUIET_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3")
_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}

T = TypeVar("T")


def quiet_boto_logs() -> None:
    """Keep the S3 client's loggers at INFO or above (synced sources use this too)."""
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level < logging.INFO:  # NOTSET (inherit) or DEBUG
            logger.setLevel(logging.INFO)


class S3Originals:
    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        grace_s: float = SWEEP_GRACE_S,
    ):
        if (access_key_id is None) != (secret_access_key is None):
            raise ValueError("an access key id and a secret access key go together")
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        self.region = region or "us-east-1"
        self._keys = (access_key_id, secret_access_key)
        self.grace_s = grace_s
        self._clients: dict[bool, S3Client] = {}
        self._clients_lock = threading.Lock()
        self._reachability = Reachability(self.where, self._probe, self.tell)

    def __repr__(self) -> str:  # never the keys
        return f"S3Originals({self.where!r}, endpoint_url={self.endpoint_url!r})"

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    def key(self, stored_name: str) -> str:
        check_stored_name(stored_name)
        return f"{self.prefix}{stored_name[:2]}/{stored_name}"

    def save(self, data: bytes) -> str:
        """Put the bytes, even when the same content is there: that refreshes its age, so
        another server's sweep leaves it until the row that names it is committed."""
        stored_name = content_hash(data)
        key = self.key(stored_name)
        self._call(
            "storing an original", lambda c: c.put_object(Bucket=self.bucket, Key=key, Body=data)
        )
        return stored_name

    def read(self, stored_name: str) -> bytes:
        key = self.key(stored_name)

        def get(client: S3Client) -> bytes:
            body = client.get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                return body.read()
            finally:
                body.close()

        try:
            return self._call("reading an original", get, missing=FileNotFoundError(key))
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.where}{stored_name[:2]}/{stored_name}") from None

    def delete(self, stored_name: str) -> None:
        key = self.key(stored_name)
        self._call("deleting an original", lambda c: c.delete_object(Bucket=self.bucket, Key=key))

    def exists(self, stored_name: str) -> bool:
        key = self.key(stored_name)
        try:
            self._call(
                "looking for an original",
                lambda c: c.head_object(Bucket=self.bucket, Key=key),
                missing=FileNotFoundError(key),
            )
        except FileNotFoundError:
            return False
        return True

    def names(self) -> Iterator[str]:
        for key, _, _ in self._listing():
            yield key.rsplit("/", 1)[1]

    def sweep(self, in_use: Container[str]) -> list[PurePosixPath]:
        """Remove the originals no document names that are older than ``grace_s`` (an
        upload elsewhere may be between its object and its row); returns their keys."""
        cutoff = time.time() - self.grace_s
        unnamed = [
            (key, size)
            for key, size, modified in self._listing()
            if key.rsplit("/", 1)[1] not in in_use and modified < cutoff
        ]
        removed = []
        for key, size in unnamed:
            self.delete(key.rsplit("/", 1)[1])
            log.warning(
                "removed s3://%s/%s, left by an interrupted upload or delete (%d bytes)",
                self.bucket,
                key,
                size,
            )
            removed.append(PurePosixPath(key))
        return removed

    def problem(self) -> str | None:
        return self._reachability.problem()

    def tell(self, exc: BaseException) -> str:
        """The error in words, the keys blanked out."""
        text = f"{type(exc).__name__}: {exc}"
        for secret in self._keys:
            if secret:
                text = text.replace(secret, "***")
        return text

    def _listing(self) -> Iterator[tuple[str, int, float]]:
        """(key, size, modified as a timestamp) of every original under the prefix."""
        try:
            paginator = self._client(probe=False).get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix):
                for item in page.get("Contents", []):
                    key = str(item["Key"])
                    folder, _, name = key[len(self.prefix) :].partition("/")
                    if len(folder) == 2 and name.startswith(folder) and _is_hex64(name):
                        yield key, int(item.get("Size", 0)), item["LastModified"].timestamp()
        except (ClientError, BotoCoreError) as exc:
            raise self._unavailable("listing the originals", exc) from None

    def _call(
        self,
        what: str,
        call: Callable[[S3Client], T],
        *,
        missing: FileNotFoundError | None = None,
        probe: bool = False,
    ) -> T:
        """``call`` with the client; a missing object as ``missing`` when given, and any
        failure of the bucket (unreachable, timed out, refused) as ``BlobsUnavailable``."""
        try:
            return call(self._client(probe))
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if missing is not None and code in _NOT_FOUND:
                raise missing from None
            raise self._unavailable(what, exc, probe=probe) from None
        except BotoCoreError as exc:  # no connection, a timeout, a broken answer
            raise self._unavailable(what, exc, probe=probe) from None

    def _unavailable(self, what: str, exc: Exception, *, probe: bool = False) -> BlobsUnavailable:
        """The failure in words (keys blanked), told to readiness at once (unless it is
        readiness's own check failing)."""
        reason = f"{what} in {self.where} failed: {self.tell(exc)}"
        if not probe:
            self._reachability.failed(reason)
        return BlobsUnavailable(reason)

    def _probe(self) -> None:
        self._call("checking the bucket", lambda c: c.head_bucket(Bucket=self.bucket), probe=True)

    def _client(self, probe: bool) -> S3Client:
        """One client for operations and one, with a shorter timeout and no retry, for
        readiness's check: each made once (making one is not thread-safe)."""
        with self._clients_lock:
            if probe not in self._clients:
                self._clients[probe] = self._make_client(probe)
            return self._clients[probe]

    def _make_client(self, probe: bool) -> S3Client:
        import boto3.session
        from botocore.config import Config

        quiet_boto_logs()
        timeout = PROBE_TIMEOUT_S if probe else None
        config = Config(
            connect_timeout=timeout or CONNECT_TIMEOUT_S,
            read_timeout=timeout or READ_TIMEOUT_S,
            retries={"total_max_attempts": 1 if probe else ATTEMPTS, "mode": "standard"},
            # MinIO, Ceph and the like: buckets as a path, not as a host name
            s3={"addressing_style": "path"} if self.endpoint_url else None,
        )
        access_key_id, secret_access_key = self._keys
        client: S3Client = boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint_url,
            region_name=self.region,
            aws_access_key_id=access_key_id,
            aws_secret_access_key=secret_access_key,
            config=config,
        )
        return client


def _is_hex64(name: str) -> bool:
    try:
        check_stored_name(name)
    except ValueError:
        return False
    return True
