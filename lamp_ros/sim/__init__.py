"""A simulated robot for demos and tests: cameras and joints that follow the commands."""
