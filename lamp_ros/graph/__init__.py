"""The typed pipeline DAG: plain dataclasses that round-trip through JSON without loss."""

from lamp_ros.graph.graph import Edge, Graph, Node, OpGraph  # noqa: F401
from lamp_ros.graph.types import TensorType  # noqa: F401
