"""The ROS 2 side: a lifecycle node around the Runtime, message conversion, diagnostics."""
