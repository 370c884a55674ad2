"""A camera driver as robots have them, for test/node/test_raw_images.py: plain rclpy with
default settings (no Fast DDS profile: the test starts it without one), one sensor_msgs/Image
publisher per topic, and a thread that publishes every camera's rgb8 frame back to back at the
frame rate, as a driver's capture thread does. Runs until it is terminated.

    python test/raw_camera_driver.py WIDTHxHEIGHT RATE_HZ {sensor_data|default} TOPIC...

sensor_data: best effort, depth 5 (most camera drivers); default: reliable, depth 10 (what
image_transport publishers use).
"""

import signal
import sys
import threading
import time

import numpy as np
import rclpy
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from rclpy.signals import SignalHandlerOptions
from sensor_msgs.msg import Image


def main(argv) -> None:
    width, height = (int(v) for v in argv[0].split('x'))
    rate, qos, topics = float(argv[1]), argv[2], argv[3:]
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    # our handlers: the capture thread ends before the publishers go (a publish racing the
    # context's shutdown can hang the process)
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = Node('raw_camera_driver')
    pubs = [node.create_publisher(Image, topic, qos_profile_sensor_data
                                  if qos == 'sensor_data' else 10) for topic in topics]
    frame = np.random.default_rng(0).integers(0, 255, (height, width, 3), np.uint8).tobytes()
    msg = Image(height=height, width=width, encoding='rgb8', step=3 * width, data=frame)

    def capture():
        due = time.monotonic()
        while not stop.is_set():
            msg.header.stamp = node.get_clock().now().to_msg()
            for pub in pubs:
                pub.publish(msg)
            due += 1.0 / rate
            stop.wait(max(0.0, due - time.monotonic()))

    thread = threading.Thread(target=capture)
    thread.start()
    while not stop.wait(0.5):  # publishing needs no executor: nothing to spin
        pass
    thread.join()
    node.destroy_node()
    rclpy.shutdown()


if __name__ == '__main__':
    main(sys.argv[1:])
