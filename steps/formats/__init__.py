"""The formats of docs/formats.md as data models that know no planner and no engine: Facts, Answers,
Plan, the run's state and events, and the lock file."""
