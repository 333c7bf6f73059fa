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
