"""runlane-sqs: durable background work on AWS (DynamoDB runs, SQS wakeups).

The top-level names are written once, in ``__init__.pyi`` beside this file: type
checkers read them there, and lazy_loader (scientific-python's SPEC 1) imports each from
its module on first use (PEP 562), so importing a submodule (the Lambda consumer, the
errors, the testing helpers) loads only what that submodule needs: ``from runlane_sqs
import Runlane`` imports the app and boto3, ``runlane_sqs.Worker`` the long-running
worker (docs/deploy-lambda.md, "Cold start").
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
