"""What turns a verified graph into a plan: the passes, the schedule, the cost model."""
