"""Widgets of the wizard: the log pane, the memory gauge, answer fields."""
