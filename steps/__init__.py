"""The mlsetup engine: probe, knowledge, answers, planner, runner. Knows nothing of Textual."""
