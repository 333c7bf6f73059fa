"""The ports: protocols of the run store and the wakeup transport, sync and async."""
