"""What the driver and the executors' runners say to each other, and what both processes serve:
work items and results, generation pushes, fences, the runner socket, placement, health."""
