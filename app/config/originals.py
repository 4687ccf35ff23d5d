"""Where this deployment keeps uploaded originals (``RAGDESK_BLOB_URL``): the data
directory's ``uploads/`` by default, a directory several servers mount, or an S3 bucket."""

from __future__ import annotations

from pathlib import Path

from app.config.settings import Settings
from retrieval.blobs import Originals
from retrieval.uploads import UploadFiles


def open_originals(settings: Settings) -> Originals:
    """The store the settings name; nothing is contacted yet (a bucket is first reached by
    readiness's check or the first upload), so a server starts while it is unreachable."""
    server = settings.server
    url = server.blob_url
    if url is None:
        return UploadFiles(settings.uploads_dir)
    if not url.startswith("s3://"):
        return UploadFiles(Path(url.removeprefix("file://")), shared=True)
    from retrieval.s3_blobs import S3Originals  # botocore on use

    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    key_id, secret = server.blob_access_key_id, server.blob_secret_access_key
    return S3Originals(
        bucket,
        prefix,
        endpoint_url=server.blob_endpoint_url,
        region=server.blob_region,
        access_key_id=key_id.get_secret_value() if key_id is not None else None,
        secret_access_key=secret.get_secret_value() if secret is not None else None,
    )
