"""mlsetup's front ends: the CLI, the plain console renderer and the Textual wizard."""
