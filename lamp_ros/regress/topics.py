"""Which topics a recording holds and how replay reads them (defaults of config/vla.yaml)."""

IMAGE = 'sensor_msgs/msg/Image'
COMPRESSED = 'sensor_msgs/msg/CompressedImage'
JOINT_STATE = 'sensor_msgs/msg/JointState'
TRAJECTORY = 'trajectory_msgs/msg/JointTrajectory'
FLOAT_ARRAY = 'std_msgs/msg/Float64MultiArray'
DIAGNOSTICS = 'diagnostic_msgs/msg/DiagnosticArray'

SLOTS = ('base', 'left_wrist', 'right_wrist')  # the simulated arm's cameras (lamp sim's default)
JOINTS_TOPIC = '/joint_states'
COMMAND_TOPICS = {'/vla_policy/joint_trajectory': TRAJECTORY,
                  '/vla_policy/commands': FLOAT_ARRAY}


def camera_topic(slot: str) -> str:
    """vla_node's default topic for a camera slot (node/params.py: cameras [""])."""
    return f'/camera/{slot}/image_raw'


def camera_slot(topic: str) -> str | None:
    """The slot of a default camera topic (raw or /compressed), else None."""
    parts = topic.removesuffix('/compressed').split('/')
    if len(parts) == 4 and parts[0] == '' and parts[1] == 'camera' and parts[3] == 'image_raw':
        return parts[2]
    return None


def recorded(slots=SLOTS) -> dict:
    """{topic: type} a recording holds: each camera slot's topic (raw and compressed), the
    joint states, the node's commands and latency messages, the diagnostics."""
    return {
        **{camera_topic(slot): IMAGE for slot in slots},
        **{f'{camera_topic(slot)}/compressed': COMPRESSED for slot in slots},
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
