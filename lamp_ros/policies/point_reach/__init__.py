"""point_reach: two models with numpy glue between them, the third kind of pipeline the seeds
describe (a perception model feeding a controller). A CNN finds a 2D point in the camera frame;
the policy's own host operator (glue.py) turns it into a 3D target with a calibration read from
a resource file; an MLP controller maps (target, joint state) to a chunk of joint targets.

Its modules import each other relatively, so the package works under any name and outside
lamp_ros (a test copies it out). This file imports nothing: the robot imports glue.py when it
loads an artifact, and that must not pull in torch."""
