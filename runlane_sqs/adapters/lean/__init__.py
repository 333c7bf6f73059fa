"""The lean clients: the per-run requests of DynamoDB and SQS without botocore's client
machinery, and with botocore's signing, credentials, retry rules and events.

:class:`~.client.LeanClient` wraps the app's botocore client and
:class:`~.aio.AsyncLeanClient` the async worker's aiobotocore client: the operations
they are given (:data:`~.protocol.HOT_OPERATIONS`) they send themselves, the way the
botocore client would (the same URL, body bytes and signed headers, which
``tests/contract/test_lean_parity.py`` holds them to); every other attribute is the
wrapped client's.

- **Signing and credentials**: botocore's ``SigV4Auth`` with the frozen credentials of
  the app's session, so every provider keeps working (environment, profiles, ECS task
  role, IMDS, web identity) and refreshes as it does for botocore. A request refused for
  expired credentials (``ExpiredToken``) refreshes them and is signed and sent again,
  once.
- **HTTP**: sync, keep-alive ``http.client`` connections of the library's own
  (:mod:`.keepalive`), set up as the botocore client's HTTP session is (CA bundle,
  timeouts, pool size, ``TCP_NODELAY``); through a proxy or with a client certificate,
  the botocore client's session itself. Async, the aiobotocore client's own session.
- **Responses and errors** (:mod:`.protocol`): parsed as botocore's JSON parser does for
  these operations (blobs decoded, ``ResponseMetadata`` added); an error is the client's
  own ``ClientError`` class for its code, with the same ``response`` (``Error``, the
  modeled fields such as a refused condition's ``Item``, ``ResponseMetadata``).
- **Retries**: botocore's standard retry mode (its retry conditions, exponential
  backoff with jitter and retry quota), each attempt signed anew.
- **Events**: the client's own ``provide-client-params``, ``before-parameter-build``,
  ``before-call`` and ``after-call`` events, with the arguments botocore gives them, so
  what hooks them (request counters, tracing, a handler that answers in place of the
  service) sees these requests too; headers a ``before-call`` handler adds (a Lambda
  trace id) are sent unsigned, as botocore sends them.

What they cannot send the way botocore would (:func:`~.protocol.lean_unsupported`, and
the configurations ``runlane_sqs.adapters.aws`` refuses), is left to botocore.

- **botocore's internals**: what of the above botocore (or aiobotocore) offers no public
  way to do (forcing a credentials refresh, finding an event's handlers, reading the
  HTTP session's settings, the standard retry mode's classes, the signer's hooks) goes
  through :mod:`.botocore_internals` alone, whose ``READS`` lists each private attribute
  and undocumented function it uses. ``pyproject.toml`` pins botocore and boto3 to the
  minor release CI tests (1.40), and ``tests/contract/test_botocore_internals.py``
  fails, naming the internal, when the installed botocore no longer has one as read.
"""
