"""Where a stored value may be read from: a reference names an object of its own
environment's values, at the key of its own hash (docs/payloads.md, "Where a value
opens")."""

from __future__ import annotations

import pytest

from runlane_sqs.core.values import Reference, misplaced, new_generation, object_key

SHA = "ab" * 32
OTHER_SHA = "cd" * 32


def reference(key: str, sha256: str = SHA, size: int = 100) -> Reference:
    return Reference("bucket", key, size, sha256)


def test_a_reference_the_library_writes_is_in_place() -> None:
    assert misplaced(reference(object_key("prod", SHA, new_generation())), "prod") is None


@pytest.mark.parametrize(
    "key",
    [
        f"staging/values/{SHA}/0123456789abcdef",  # another environment's
        f"prod-eu/values/{SHA}/0123456789abcdef",  # an environment it is a prefix of
        f"prodvalues/{SHA}/0123456789abcdef",
        "config/app-secrets.json",  # no value at all
        f"prod/values/{OTHER_SHA}/0123456789abcdef",  # another value's hash
        f"prod/values/{SHA}/0123456789abcdef/../../../config/app-secrets.json",
        f"prod/values/{SHA}/",
        f"prod/values/{SHA}/ABCDEF",
        f"prod/values/{SHA}",
        f"/prod/values/{SHA}/0123456789abcdef",
    ],
)
def test_a_reference_to_any_other_key_is_misplaced(key: str) -> None:
    refused = misplaced(reference(key), "prod")
    assert refused is not None and "not an object of environment 'prod'" in refused


def test_a_reference_whose_hash_is_no_sha256_or_whose_size_is_negative_is_misplaced() -> None:
    key = object_key("prod", SHA.upper(), "0123456789abcdef")
    assert misplaced(reference(key, SHA.upper()), "prod") is not None
    key = object_key("prod", SHA, "0123456789abcdef")
    assert misplaced(reference(key, size=-1), "prod") == "its size is negative"
