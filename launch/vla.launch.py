"""Launch vla_node as a lifecycle node and bring it to active by itself.

    ros2 launch lamp_ros vla.launch.py artifact:=/path/to/artifact params_file:=/path/vla.yaml

Parameters come from config/vla.yaml (installed with the package) or `params_file`; the
`artifact` argument overrides the one in the file. The node starts with config/fastdds.xml as
its Fast DDS profile (raw camera frames at camera rate; lamp_ros/node/dds_profile.py) unless
FASTDDS_DEFAULT_PROFILES_FILE names one of yours; `cyclone_interop:=true` gives it
config/fastdds_interop.xml instead (the same plus what a robot whose stack runs on Cyclone DDS
needs; the file says why). Event handlers configure the node once it is up and activate it once
configured (works on Jazzy and Kilted).
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch import LaunchDescription
from launch.actions import (DeclareLaunchArgument, EmitEvent, RegisterEventHandler,
                            SetEnvironmentVariable)
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition


def generate_launch_description():
    share = get_package_share_directory('lamp_ros')
    default_params = os.path.join(share, 'config', 'vla.yaml')
    artifact = DeclareLaunchArgument('artifact', default_value='artifacts/pi05_tiny',
                                     description='compiled artifact directory')
    params_file = DeclareLaunchArgument('params_file', default_value=default_params,
                                        description='vla_node parameters (YAML)')
    cyclone_interop = DeclareLaunchArgument(
        'cyclone_interop', default_value='false',
        description='true: Fast DDS without XTypes type information, so that a robot stack on '
        'Cyclone DDS exchanges samples with the node (config/fastdds_interop.xml)')
    interop_profile = SetEnvironmentVariable(
        'FASTDDS_DEFAULT_PROFILES_FILE', os.path.join(share, 'config', 'fastdds_interop.xml'),
        condition=IfCondition(LaunchConfiguration('cyclone_interop')))
    node = LifecycleNode(
        package='lamp_ros', executable='vla_node', name='vla_policy', namespace='',
        output='screen',
        parameters=[LaunchConfiguration('params_file'),
                    {'artifact': LaunchConfiguration('artifact'), 'autostart': False}])
    configure = EmitEvent(event=ChangeState(
        lifecycle_node_matcher=matches_action(node),
        transition_id=Transition.TRANSITION_CONFIGURE))
    activate_when_configured = RegisterEventHandler(OnStateTransition(
        target_lifecycle_node=node, start_state='configuring', goal_state='inactive',
        entities=[EmitEvent(event=ChangeState(
            lifecycle_node_matcher=matches_action(node),
            transition_id=Transition.TRANSITION_ACTIVATE))]))
    return LaunchDescription([artifact, params_file, cyclone_interop, interop_profile,
                              activate_when_configured, node, configure])
