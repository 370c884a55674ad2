"""lamp_ros: compile a robot VLA policy into a versioned artifact and run it from ROS 2."""

__version__ = '0.1.0'
