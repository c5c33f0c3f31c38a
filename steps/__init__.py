"""The mlsetup engine: probe, knowledge, answers, planner, runner. Knows nothing of Textual.

Its packages are its layers, each importing only the ones below it ([tool.importlinter] in
pyproject.toml): apply > planning > stack > decide | run > building | probing > formats >
known > core.
"""
