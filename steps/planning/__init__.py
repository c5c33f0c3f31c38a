"""The planner and the step registry, and the step modules (one per registry entry), each planning
its own step (none knows another); apt's commands."""
