"""Launchbay for programs written against a training framework: each module here imports its
framework when it is imported itself, never before, so Launchbay does not depend on any.

- `jobs.integrations.accelerate.LaunchbayTracker`: `Accelerator(log_with=LaunchbayTracker())`.
- `jobs.integrations.transformers.LaunchbayCallback`: `Trainer(..., callbacks=[...])`.
- `jobs.integrations.lightning.LaunchbayLogger`: `L.Trainer(logger=LaunchbayLogger())`.

`jobs.integrations.attach` does the same for programs that use none of these: capture
(`capture: auto`) attaches it when the program imports its framework.
"""
