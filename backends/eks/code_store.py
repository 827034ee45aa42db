"""The S3 store for code bundles too large for a ConfigMap (``bundle.CodeStore``): the kubernetes
backend is handed one by ``open_backend`` and sends a bundle through it to ``cluster.code_bucket``."""

from __future__ import annotations

from ...trainer.s3url import S3Url
from ..errors import BackendError


class S3CodeStore:
    """Code bundles in S3, through this machine's AWS identity (the pods read them with theirs)."""

    def __init__(self, profile: str | None = None) -> None:
        self.profile = profile

    def put(self, url: str, data: bytes) -> bool:
        from .session import AwsError, AwsSession  # boto3 loads with the first bundle, not before

        location = S3Url.parse(url)
        aws = AwsSession(None, profile=self.profile)
        try:
            if aws.find("s3", "head_object", Bucket=location.bucket, Key=location.key) is not None:
                return False
            aws.call(
                "s3", "put_object", Bucket=location.bucket, Key=location.key, Body=data, ServerSideEncryption="AES256"
            )
        except AwsError as exc:
            raise BackendError(
                f"cannot send the code bundle to {url}: {exc}",
                "check cluster.code_bucket and that your AWS identity may write there",
            ) from None
        return True
