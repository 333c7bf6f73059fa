"""Names the shop app and the tests share (importing the app itself needs a backend)."""

APP_SPEC = "tests.processes.cli.apps.shop:app"
LEASE_SECONDS = 3
FAIL_ENV = "SHOP_FAIL"
"""When set in the worker's environment, ``shop.charge`` fails."""
MARKERS_ENV = "SHOP_MARKERS"
"""Directory where ``shop.patient`` leaves ``<run id>.started`` and ``.finished``."""

ECHO = "shop.echo"
CHARGE = "shop.charge"
FAIL_WITH = "shop.fail_with"
NAP = "shop.nap"
APPROVAL = "shop.approval"
PATIENT = "shop.patient"
PATIENT_ASYNC = "shop.patient_async"
FAN_OUT = "shop.fan_out"
"""Maps ``shop.echo`` over ``payload["items"]``, two at a time, and sums what they echo."""
CHARGE_ALL = "shop.charge_all"
"""Maps ``shop.charge`` over ``payload["amounts"]`` and totals what it charged."""
DIGEST = "shop.digest"
"""Debounced: triggers of a key collapse until an hour of quiet."""
BULK = "shop.bulk"
"""Batched: items gather in batches of three, at most an hour old."""
ORDER = "shop.order"
"""Charges, then waits for ``payload["token"]``; what it does between the two is the
deploy's code (``SHOP_CODE``): ``v1`` nothing, ``inserted`` an ``audit`` step,
``patched`` that step behind ``ctx.patched("audit")``. Each step leaves
``<run id>.<step>`` in the markers directory, one line per execution."""
CODE_ENV = "SHOP_CODE"
PINNED = "shop.pinned"
"""Waits for ``payload["token"]``; its runs finish on the app version they started under."""
COUNT = "shop.count"
"""Reports its progress ``payload["steps"]`` times, ``payload["pause"]`` seconds apart,
then fails if ``payload["fail"]``."""
SHIP = "shop.ship"
"""Typed: takes a ``Parcel`` (a pydantic model) and returns a ``Label`` (a dataclass)."""
CRATE = "shop.crate"
"""Typed: takes a ``Crate``, a pydantic model with a field of a class of its own
(``arbitrary_types_allowed``): validated by ``isinstance``, it has no JSON Schema."""
