"""An S3 location (``s3://BUCKET/KEY``): the one parser and printer of such URLs for the whole
package. It lives in the trainer, the lowest layer, because the pods run the trainer with its
own modules only (model files, data from S3); backends and the CLI import it from here.
Standard library only."""

from __future__ import annotations

from dataclasses import dataclass

SCHEME = "s3://"


@dataclass(frozen=True)
class S3Url:
    """A bucket and a key (or a key prefix; empty for the bucket's root). Only the URL's form is
    checked here; a bucket's naming rules are ``backends.names.check_bucket_name``."""

    bucket: str
    key: str = ""

    @staticmethod
    def is_s3(text: object) -> bool:
        """Whether ``text`` is meant as an S3 URL (a path otherwise)."""
        return isinstance(text, str) and text.startswith(SCHEME)

    @classmethod
    def parse(cls, text: object) -> S3Url:
        """``s3://BUCKET[/KEY]``; ValueError with the reason for anything else."""
        if not isinstance(text, str) or not text.startswith(SCHEME):
            raise ValueError(f"{text!r:.80} is not an s3:// URL")
        bucket, _, key = text[len(SCHEME) :].partition("/")
        if not bucket:
            raise ValueError(f"{text!r:.80} names no bucket")
        return cls(bucket, key)

    @classmethod
    def parse_file(cls, text: object) -> S3Url:
        """An S3 URL of one object (a key that is not empty and not a prefix ending in '/')."""
        url = cls.parse(text)
        if not url.key or url.key.endswith("/"):
            raise ValueError(f"{text!r:.80} is not an s3://BUCKET/KEY URL of a file")
        return url

    def join(self, *names: str) -> S3Url:
        """The location ``names`` below this one (``s3://b/models`` + ``run``, ``model.pt``)."""
        parts = [p.strip("/") for p in (self.key, *names) if p.strip("/")]
        return S3Url(self.bucket, "/".join(parts))

    def __str__(self) -> str:
        return f"{SCHEME}{self.bucket}/{self.key}" if self.key else f"{SCHEME}{self.bucket}"
