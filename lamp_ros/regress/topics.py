"""Which topics a recording holds and how replay reads them (defaults of config/vla.yaml)."""

IMAGE = 'sensor_msgs/msg/Image'
COMPRESSED = 'sensor_msgs/msg/CompressedImage'
JOINT_STATE = 'sensor_msgs/msg/JointState'
TRAJECTORY = 'trajectory_msgs/msg/JointTrajectory'
FLOAT_ARRAY = 'std_msgs/msg/Float64MultiArray'
DIAGNOSTICS = 'diagnostic_msgs/msg/DiagnosticArray'
STRING = 'std_msgs/msg/String'
BYTES = 'std_msgs/msg/UInt8MultiArray'

SLOTS = ('base', 'left_wrist', 'right_wrist')  # the simulated arm's cameras (lamp sim's default)
JOINTS_TOPIC = '/joint_states'
COMMAND_TOPICS = {'/vla_policy/joint_trajectory': TRAJECTORY,
                  '/vla_policy/commands': FLOAT_ARRAY}
# what vla_node says about its own work (node/records.py), under its default name
SESSION_TOPIC = '/vla_policy/session'
LATENCY_TOPIC = '/vla_policy/command_latency'
INFERENCE_TOPIC = '/vla_policy/inference'
EPISODE_STATE_TOPIC = '/vla_policy/episode_state'
NODE_RECORDS = {SESSION_TOPIC: STRING, LATENCY_TOPIC: FLOAT_ARRAY,
                INFERENCE_TOPIC: FLOAT_ARRAY, EPISODE_STATE_TOPIC: BYTES}
SENSORS = (IMAGE, COMPRESSED, JOINT_STATE)


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
    """{topic: type} a recording holds before the node says which inputs it reads: each camera
    slot's default topic (raw and compressed), the joint states, the node's commands, its own
    records (session, latency, inferences, episode state) and the diagnostics."""
    return {
        **{camera_topic(slot): IMAGE for slot in slots},
        **{f'{camera_topic(slot)}/compressed': COMPRESSED for slot in slots},
        JOINTS_TOPIC: JOINT_STATE,
        **COMMAND_TOPICS,
        **NODE_RECORDS,
        '/diagnostics': DIAGNOSTICS,
    }


def session_inputs(session: dict) -> dict:
    """{topic: type} of the inputs and the command topic a node's `~/session` names."""
    out = {c['topic']: COMPRESSED if c['compressed'] else IMAGE
           for c in session.get('cameras', {}).values()}
    out[session.get('joint_states_topic', JOINTS_TOPIC)] = JOINT_STATE
    command = (session.get('topics') or {}).get('command')
    if command:
        out[command] = TRAJECTORY if session.get('output') == 'joint_trajectory' \
            else FLOAT_ARRAY
    for name, topic in (session.get('topics') or {}).items():
        if name in ('latency', 'inference', 'episode_state'):
            out[topic] = BYTES if name == 'episode_state' else FLOAT_ARRAY
    return out


def command_positions(msg, msgtype: str):
    """The commanded joint positions (first trajectory point, or the array)."""
    if msgtype == TRAJECTORY:
        return list(msg.points[0].positions) if len(msg.points) else None
    return list(msg.data)
