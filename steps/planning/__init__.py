"""The planner and the step registry, and the step modules, each planning its own step (none knows
another): driver, fabric, toolkit, venv, extensions; apt's commands."""
