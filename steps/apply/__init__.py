"""Applying a plan: the engine and what it hands a run's work to (actions, builds, the frozen
installs, the settled stack, reboots, the service), its report, logs and diagnoses."""
