"""Issue 30: one S3 URL type (``trainer/s3url.py``) instead of ``s3://`` split by hand in six
places; every front end and backend parses and prints through it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchdeck.trainer.s3url import S3Url


def test_parse_join_and_print() -> None:
    url = S3Url.parse("s3://models-1/runs/")
    assert (url.bucket, url.key) == ("models-1", "runs/")
    assert str(url.join("r-1", "model.pt")) == "s3://models-1/runs/r-1/model.pt"
    assert str(S3Url("b")) == "s3://b" and str(S3Url("b").join("x")) == "s3://b/x"
    assert S3Url.parse_file("s3://b/k/model.pt").key == "k/model.pt"
    for bad in ("s3://", "s3:///key", "https://b/k", "/data/x", None):
        with pytest.raises(ValueError):
            S3Url.parse(bad)
    for not_a_file in ("s3://b", "s3://b/prefix/"):
        with pytest.raises(ValueError, match="not an s3://BUCKET/KEY URL of a file"):
            S3Url.parse_file(not_a_file)
    assert S3Url.is_s3("s3://b/k") and not S3Url.is_s3("/s3://b") and not S3Url.is_s3(None)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(bucket=st.from_regex(r"[a-z0-9][a-z0-9.-]{1,20}", fullmatch=True), key=st.text(max_size=40))
def test_any_url_prints_back_as_it_was_read(bucket: str, key: str) -> None:
    text = f"s3://{bucket}/{key}" if key else f"s3://{bucket}"
    assert str(S3Url.parse(text)) == text
