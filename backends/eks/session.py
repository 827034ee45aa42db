"""boto3 behind one door: a session for one region whose clients retry
throttling with botocore's standard mode and a bounded number of attempts,
blocking calls moved to threads for async callers, and every SDK failure
turned into an ``AwsError`` with a one-line message and a hint. Messages
pass through ``redact`` so no credential from the environment is ever shown.

boto3 honours ``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_<SERVICE>``)
itself: that is how the tests point it at moto's server."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from botocore.client import BaseClient

from ..errors import BackendError
from .aws_objects import Answer

MAX_ATTEMPTS = 5
"""Attempts per call, the first included, before a throttled call fails (botocore's standard mode)."""
_SECRET_VARS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ACCESS_KEY_ID")
NOT_FOUND = {
    "ResourceNotFoundException",
    "NoSuchEntity",
    "NoSuchEntityException",
    "NotFoundException",
    "FileSystemNotFound",
    "MountTargetNotFound",
    "InvalidGroup.NotFound",
    "InvalidGroupId.NotFound",
    "InvalidLaunchTemplateName.NotFoundException",
    "InvalidLaunchTemplateId.NotFound",
    "RepositoryNotFoundException",
    "ImageNotFoundException",
    "NoSuchBucket",
    "NoSuchKey",
    "404",
    "NoSuchTagSet",
    "NoSuchBucketPolicy",
    "NoSuchPublicAccessBlockConfiguration",
    "ServerSideEncryptionConfigurationNotFoundError",
}
"""AWS's words, service by service, for "there is no such thing"."""
_THROTTLED = {
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "SlowDown",
    "Throttled",
}


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """``text`` with any credential found in the environment replaced by ***."""
    env = os.environ if env is None else env
    for var in _SECRET_VARS:
        value = env.get(var)
        if value and len(value) >= 8:
            text = text.replace(value, "***")
    # a signed URL's or header's credential fields, whatever their value
    return re.sub(r"(X-Amz-(?:Security-Token|Signature|Credential)=)[^&\s\"']+", r"\1***", text)


class AwsError(BackendError):
    """An AWS call failed; ``code`` is AWS's error code ('' for network and credential failures)."""

    def __init__(self, message: str, hint: str = "", code: str = "", operation: str = ""):
        super().__init__(redact(message), redact(hint))
        self.code, self.operation = code, operation

    @property
    def not_found(self) -> bool:
        return self.code in NOT_FOUND


def _hint_for(code: str, operation: str) -> str:
    if code in ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException"):
        return f"your identity may not call {operation}: add the permission to its IAM policy"
    if code in ("ExpiredToken", "ExpiredTokenException", "RequestExpired"):
        return "the credentials expired: refresh them (aws sso login, or new keys)"
    if code in ("InvalidClientTokenId", "SignatureDoesNotMatch", "UnrecognizedClientException"):
        return "the credentials are not valid: check AWS_PROFILE or the access key"
    if code in _THROTTLED:
        return "AWS is rate-limiting this account; wait a minute and run it again (it resumes)"
    if code in ("ResourceLimitExceeded", "LimitExceeded", "LimitExceededException", "ServiceQuotaExceededException"):
        return "an account limit is reached: raise it in the Service Quotas console"
    return ""


def translate(exc: BaseException, operation: str) -> AwsError:
    """An SDK exception as the project's error (the one place that knows botocore's exceptions)."""
    from botocore import exceptions as bx

    if isinstance(exc, bx.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        message = str(error.get("Message", "")) or code
        attempts = Answer(exc.response).whole("ResponseMetadata", "RetryAttempts")
        if code in _THROTTLED:
            message = f"AWS kept throttling {operation} ({attempts + 1} attempts): {message}"
        else:
            message = f"{operation}: {code}: {message}"
        return AwsError(message, _hint_for(code, operation), code, operation)
    if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return AwsError(
            "no AWS credentials found",
            "run `aws configure` or `aws sso login`, or set AWS_PROFILE (or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY)",
            "NoCredentials",
            operation,
        )
    if isinstance(exc, bx.NoRegionError):
        return AwsError("no AWS region", "pass --region or set AWS_REGION", "NoRegion", operation)
    if isinstance(exc, (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError)):
        return AwsError(
            f"cannot reach AWS for {operation}: {exc}",
            "check the network (and AWS_ENDPOINT_URL if set)",
            "Unreachable",
            operation,
        )
    if isinstance(exc, bx.ParamValidationError):
        return AwsError(f"{operation}: {str(exc).splitlines()[-1]}", "", "ParamValidation", operation)
    if isinstance(exc, bx.BotoCoreError):
        return AwsError(f"{operation}: {exc}", "", type(exc).__name__, operation)
    return AwsError(f"{operation}: {type(exc).__name__}: {exc}", "", type(exc).__name__, operation)


class AwsSession:
    """boto3 clients for one region (and profile), retrying throttled calls."""

    def __init__(self, region: str | None = None, profile: str | None = None, max_attempts: int = MAX_ATTEMPTS):
        self.region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        self.profile = profile
        self.max_attempts = max_attempts
        self._session: Any = None
        self._clients: dict[str, Any] = {}
        self._account: str | None = None

    def account(self) -> str:
        """The AWS account these credentials act in (asked once)."""
        if self._account is None:
            self._account = str(self.call("sts", "get_caller_identity").get("Account", ""))
        return self._account

    def _owner_checked(self, client: BaseClient, operation: str, params: dict[str, object]) -> dict[str, object]:
        """S3 calls on a bucket carry ExpectedBucketOwner (this account): bucket names are global, and a
        bucket deleted and re-made by someone else must not receive models, code or deletes."""
        if "Bucket" not in params or "ExpectedBucketOwner" in params:
            return params
        if operation in ("download_file", "upload_file"):  # the transfer manager's: in ExtraArgs
            given = params.get("ExtraArgs")
            extra = given if isinstance(given, dict) else {}
            if "ExpectedBucketOwner" in extra:
                return params
            return {**params, "ExtraArgs": {**extra, "ExpectedBucketOwner": self.account()}}
        api = client.meta.method_to_api_mapping.get(operation)
        if (
            api is None
            or "ExpectedBucketOwner" not in client.meta.service_model.operation_model(api).input_shape.members
        ):
            return params
        return {**params, "ExpectedBucketOwner": self.account()}

    def client(self, service: str) -> BaseClient:
        if service not in self._clients:
            try:
                import boto3
                from botocore.config import Config
            except ImportError:
                raise AwsError("boto3 is not installed", "pip install boto3 (torchdeck's setup installs it)") from None
            if self._session is None:
                try:
                    self._session = boto3.Session(profile_name=self.profile, region_name=self.region)
                except Exception as exc:
                    raise translate(exc, "open an AWS session") from None
            config = Config(
                retries={"mode": "standard", "total_max_attempts": self.max_attempts},
                user_agent_extra="torchdeck",
                connect_timeout=10,
                read_timeout=60,
            )
            try:
                self._clients[service] = self._session.client(service, config=config)
            except Exception as exc:
                raise translate(exc, f"{service} client") from None
        return self._clients[service]

    def call(self, service: str, operation: str, **params: object) -> dict[str, Any]:
        """One blocking call, e.g. ``call("eks", "describe_cluster", name="demo")``."""
        client = self.client(service)
        if service == "s3":
            params = self._owner_checked(client, operation, params)
        try:
            return getattr(client, operation)(**params)
        except Exception as exc:
            raise translate(exc, f"{service}.{operation}") from None

    def pages(self, service: str, operation: str, key: str, **params: object) -> Iterator[Any]:
        """Every item under ``key`` over all pages of a paginated call."""
        client = self.client(service)
        if service == "s3":
            params = self._owner_checked(client, operation, params)
        try:
            for page in client.get_paginator(operation).paginate(**params):
                yield from page.get(key, [])
        except Exception as exc:
            raise translate(exc, f"{service}.{operation}") from None

    async def acall(self, service: str, operation: str, **params: object) -> dict[str, Any]:
        """``call`` on a worker thread, for the async code paths (the console's, create's)."""
        return await asyncio.to_thread(self.call, service, operation, **params)

    async def apages(self, service: str, operation: str, key: str, **params: object) -> list[Any]:
        return await asyncio.to_thread(lambda: list(self.pages(service, operation, key, **params)))

    def find(self, service: str, operation: str, **params: object) -> dict[str, Any] | None:
        """``call``, or None where AWS says the thing is not there."""
        try:
            return self.call(service, operation, **params)
        except AwsError as exc:
            if exc.not_found:
                return None
            raise

    def gone(self, service: str, operation: str, **params: object) -> bool:
        """AWS says the thing a describe call names is not there (a probe for the waits of a delete)."""
        return self.find(service, operation, **params) is None

    async def afind(self, service: str, operation: str, **params: object) -> dict[str, Any] | None:
        return await asyncio.to_thread(self.find, service, operation, **params)
