"""rosbag2 files (mcap or sqlite3) with the `rosbags` library: no ROS install needed.

Messages are kept as CDR bytes on the way in (recorded straight from rclpy's raw subscriptions)
and decoded with the rosbags typestore on the way out; the decoded messages have the same field
names as rclpy's, so the node's conversion code reads both.
"""

from dataclasses import dataclass
import os

from rosbags.rosbag2 import Reader, ReaderError, StoragePlugin, Writer
from rosbags.typesys import get_typestore, Stores

TYPESTORE = get_typestore(Stores.ROS2_KILTED)
STORAGE = {'mcap': StoragePlugin.MCAP, 'sqlite3': StoragePlugin.SQLITE3}


class BagError(ValueError):
    """The bag cannot be read or lacks what replay needs."""


@dataclass(frozen=True)
class BagMessage:
    topic: str
    msgtype: str
    t_ns: int        # receive time recorded in the bag
    raw: bytes

    def decode(self):
        return TYPESTORE.deserialize_cdr(self.raw, self.msgtype)


class BagWriter:
    """Connections are added on a topic's first message, so absent topics stay absent."""

    def __init__(self, path: str, storage: str = 'mcap'):
        if storage not in STORAGE:
            raise ValueError(f'storage: {storage!r} not in {list(STORAGE)}')
        if os.path.exists(path):
            raise FileExistsError(f'{path}: exists; rosbag2 writes a new directory')
        self._writer = Writer(path, version=9, storage_plugin=STORAGE[storage])
        self._writer.open()
        self._connections = {}
        self.count = 0

    def write(self, topic: str, msgtype: str, t_ns: int, raw: bytes) -> None:
        if topic not in self._connections:
            self._connections[topic] = self._writer.add_connection(topic, msgtype,
                                                                   typestore=TYPESTORE)
        self._writer.write(self._connections[topic], int(t_ns), bytes(raw))
        self.count += 1

    def write_msg(self, topic: str, msgtype: str, t_ns: int, msg) -> None:
        self.write(topic, msgtype, t_ns, TYPESTORE.serialize_cdr(msg, msgtype))

    def close(self) -> None:
        self._writer.close()


def read_bag(path: str) -> list:
    """All messages in receive-time order; a truncated or corrupt bag is a BagError."""
    if not os.path.isdir(path):
        raise BagError(f'{path}: no such rosbag2 directory')
    try:
        with Reader(path) as reader:
            messages = [BagMessage(c.topic, c.msgtype, t, bytes(raw))
                        for c, t, raw in reader.messages()]
    except (ReaderError, OSError, ValueError, KeyError, EOFError) as exc:
        raise BagError(f'{path}: cannot read the bag ({type(exc).__name__}: {exc}); '
                       'truncated or corrupt?') from exc
    except Exception as exc:  # storage plugins raise their own types on damaged files
        raise BagError(f'{path}: cannot read the bag ({type(exc).__name__}: {exc}); '
                       'truncated or corrupt?') from exc
    return sorted(messages, key=lambda m: m.t_ns)


def msgtype_of(topic_types: dict, topic: str) -> str | None:
    return topic_types.get(topic)
