"""`lamp top`: a running vla_node seen and driven from a terminal, where the ROS 2 wheels bring
no `ros2` CLI (client.py talks to the node; view.py draws what it says; top.py is the command)."""
