"""Robot recordings (rosbag2 files of `lamp record`) as LeRobot v3.0 datasets.

frames: a bag sampled into one frame per command; stats: LeRobot's statistics; layout: the v3.0
file and column layout; writer/reader: the dataset on disk; build: bags -> dataset (what
`lamp dataset` calls); sample_bag: a small synthetic recording for tests and the fixture.
"""
