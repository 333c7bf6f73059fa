"""The redaction helpers: a hook's text is used; a failing or non-text hook hides the
text; digests are short, stable and do not contain the secret."""

from __future__ import annotations

from runlane_sqs.core.redaction import apply_redaction, digest, shortened


def test_no_hook_keeps_the_text_and_a_hook_rewrites_it() -> None:
    assert apply_redaction(None, "pin 1234") == "pin 1234"
    assert apply_redaction(lambda t: t.replace("1234", "****"), "pin 1234") == "pin ****"


def test_a_hook_that_raises_or_returns_no_text_hides_everything() -> None:
    assert apply_redaction(lambda t: str(1 / 0), "pin 1234") == (
        "[redacted: the redact hook raised ZeroDivisionError]"
    )
    assert apply_redaction(lambda t: None, "pin 1234") == (  # type: ignore[arg-type,return-value]
        "[redacted: the redact hook returned no text]"
    )


def test_a_digest_is_twelve_stable_hex_digits_that_do_not_reveal_the_secret() -> None:
    secret = "0123456789abcdef0123456789abcdef"
    assert digest(secret) == digest(secret) != digest(secret[::-1])
    assert len(digest(secret)) == 12 and digest(secret) not in secret
    assert digest("\ud800") == digest("\ud800")  # no UnicodeEncodeError


def test_shortened_text_ends_in_an_ellipsis_at_the_limit() -> None:
    assert shortened("abc", 3) == "abc"
    assert shortened("abcd", 3) == "ab…"
