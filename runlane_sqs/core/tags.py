"""Tags: key/value labels on a run that runs can be found by (docs/tags.md).

A trigger's ``tags={"customer": "42", "order": "7"}`` is checked here before anything
is written, as keys are (:func:`~runlane_sqs.core.names.check_key`): at most
:data:`MAX_TAGS` tags, each key a name (:data:`TAG_KEY_PATTERN`), each value at most
:data:`MAX_TAG_VALUE_CHARS` characters of printable text, without markup, stored in
:data:`~runlane_sqs.core.names.KEY_NORMAL_FORM`. A run keeps its tags for life, sorted
by key; each tag is listed on the tag index of its position (its *slot*: the first key
in slot 0, ...), so a run with ``n`` tags has ``n`` index entries
(:mod:`runlane_sqs.adapters.dynamodb.keys`, ``tag_pk``).

Nothing here performs I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping

from runlane_sqs.core.errors import InvalidKeyError
from runlane_sqs.core.names import KEY_NORMAL_FORM, REFUSED_KEY_CATEGORIES

Tags = dict[str, str]
"""A run's tags, key to value, sorted by key."""

MAX_TAGS = 4
"""Most tags one run holds: each is an entry on one of the table's tag indexes
(``tag_0`` to ``tag_3``), so this is also how many such indexes the table has."""
MAX_TAG_KEY_CHARS = 64
MAX_TAG_VALUE_CHARS = 256
TAG_KEY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
"""A tag's key: a letter or digit, then letters, digits, ``_``, ``.``, ``:`` and ``-``."""
MARKUP_CHARACTERS = frozenset("<>")
"""Refused in a tag's value: what would open or close markup where a value is shown."""


def check_tags(tags: object) -> Tags:
    """``tags`` checked and in their stored form (values normalized, sorted by key);
    raises :class:`~runlane_sqs.core.errors.InvalidKeyError` naming the tag at fault."""
    if not isinstance(tags, Mapping):
        raise InvalidKeyError(f"tags must be a mapping of text to text, not {type(tags).__name__}")
    if len(tags) > MAX_TAGS:
        raise InvalidKeyError(f"a run holds at most {MAX_TAGS} tags; {len(tags)} were given")
    checked = {check_tag_key(key): check_tag_value(key, value) for key, value in tags.items()}
    return dict(sorted(checked.items()))


def check_tag_key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidKeyError(f"a tag's key must be text, not {type(key).__name__}")
    if not TAG_KEY_PATTERN.fullmatch(key):
        shown = key if len(key) <= MAX_TAG_KEY_CHARS else key[:MAX_TAG_KEY_CHARS] + "..."
        raise InvalidKeyError(  # !a: a control or bidi character is shown escaped
            f"tag key {shown!a} must match {TAG_KEY_PATTERN.pattern} (a letter or "
            f"digit, then letters, digits, '_', '.', ':' and '-', at most "
            f"{MAX_TAG_KEY_CHARS} characters)"
        )
    return key


def check_tag_value(key: str, value: object) -> str:
    """A tag's value in :data:`KEY_NORMAL_FORM`; the error names the tag by its key (the
    value's raw characters are never echoed: they may be control or bidi characters)."""
    if not isinstance(value, str):
        raise InvalidKeyError(f"tag {key!r}: its value must be text, not {type(value).__name__}")
    for index, char in enumerate(value):
        what = REFUSED_KEY_CATEGORIES.get(unicodedata.category(char))
        if what is None and char in MARKUP_CHARACTERS:
            what = "markup"
        if what is not None:
            raise InvalidKeyError(
                f"tag {key!r}: its value contains U+{ord(char):04X} ({what}) at index {index}"
            )
    value = unicodedata.normalize(KEY_NORMAL_FORM, value)
    if not value.strip():
        raise InvalidKeyError(f"tag {key!r}: its value must not be empty")
    if value != value.strip():
        raise InvalidKeyError(f"tag {key!r}: its value must not start or end with whitespace")
    if len(value) > MAX_TAG_VALUE_CHARS:
        raise InvalidKeyError(
            f"tag {key!r}: its value is {len(value)} characters; the limit is {MAX_TAG_VALUE_CHARS}"
        )
    return value


def parse_tag(text: str) -> tuple[str, str]:
    """``key=value`` (as the CLI and the console take a tag) split and checked."""
    key, equals, value = text.partition("=")
    if not equals:
        raise InvalidKeyError(f"a tag is written key=value; {text[:80]!a} has no '='")
    key = check_tag_key(key)
    return key, check_tag_value(key, value)


def parse_tags(texts: Iterable[str]) -> Tags:
    """Several ``key=value`` texts as tags, in the order given; a key given twice is
    refused."""
    tags: Tags = {}
    for text in texts:
        key, value = parse_tag(text)
        if key in tags:
            raise InvalidKeyError(f"tag {key!r} is given twice")
        tags[key] = value
    return dict(tag_filter(tags))


def tag_filter(tags: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Tags to list runs by, checked as a run's are, in the order given: a listing reads
    the index of the first and filters on the others."""
    checked = check_tags(tags)
    return tuple((key, checked[key]) for key in tags)


def inherited(parent: Mapping[str, str], own: Mapping[str, str] | None) -> Tags:
    """A child's tags when it inherits its parent's: the parent's, with the child's own
    added (a key both give keeps the child's value), checked as one set."""
    return check_tags({**parent, **(own or {})})


def has_tags(run_tags: Mapping[str, str], wanted: Iterable[tuple[str, str]]) -> bool:
    """Whether a run's tags hold every ``(key, value)`` of ``wanted`` (tags combine as
    AND)."""
    return all(run_tags.get(key) == value for key, value in wanted)
