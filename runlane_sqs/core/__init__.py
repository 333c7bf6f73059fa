"""The pure core: run model, state machine, retry policy, wakeup format. No I/O."""
