"""``runlane-sqs console``: see and recover runs in a browser (the ``console`` extra).

A small server-rendered app (Starlette, Jinja2, a little vanilla JavaScript; no build
step) over the operator API the CLI uses (docs/console.md).
"""
