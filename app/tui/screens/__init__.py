"""The wizard's screens, one controller each (see app.tui.controllers)."""
