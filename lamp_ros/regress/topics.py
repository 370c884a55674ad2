"""Which topics a recording holds and how replay reads them (defaults of config/vla.yaml)."""

IMAGE = 'sensor_msgs/msg/Image'
COMPRESSED = 'sensor_msgs/msg/CompressedImage'
JOINT_STATE = 'sensor_msgs/msg/JointState'
TRAJECTORY = 'trajectory_msgs/msg/JointTrajectory'
FLOAT_ARRAY = 'std_msgs/msg/Float64MultiArray'
DIAGNOSTICS = 'diagnostic_msgs/msg/DiagnosticArray'

SLOTS = ('base', 'left_wrist', 'right_wrist')
CAMERAS = {slot: f'/camera/{slot}/image_raw' for slot in SLOTS}
JOINTS_TOPIC = '/joint_states'
COMMAND_TOPICS = {'/vla_policy/joint_trajectory': TRAJECTORY,
                  '/vla_policy/commands': FLOAT_ARRAY}
RECORDED = {
    **{topic: IMAGE for topic in CAMERAS.values()},
    **{f'{topic}/compressed': COMPRESSED for topic in CAMERAS.values()},
    JOINTS_TOPIC: JOINT_STATE,
    **COMMAND_TOPICS,
    '/vla_policy/command_latency': FLOAT_ARRAY,
    '/diagnostics': DIAGNOSTICS,
}


def command_positions(msg, msgtype: str):
    """The commanded joint positions (first trajectory point, or the array)."""
    if msgtype == TRAJECTORY:
        return list(msg.points[0].positions) if len(msg.points) else None
    return list(msg.data)
