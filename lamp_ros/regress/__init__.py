"""Regression by rosbag: record the node's inputs and outputs, replay them through an artifact."""
